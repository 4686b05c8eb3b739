import os,sys,time,signal,threading,torch,torch.nn as nn,torch.distributed as dist,torch.multiprocessing as mp
D=sys.argv[1];SPY=sys.argv[3]
def work(r):
 os.environ.update(MASTER_ADDR="127.0.0.1",MASTER_PORT="29611")
 dist.init_process_group("gloo",rank=r,world_size=3)
 W=4096 if D=="cuda" else 512
 m=nn.Sequential(*[nn.Linear(W,W) for _ in range(8)]).to(D)
 m=nn.parallel.DistributedDataParallel(m)
 o=torch.optim.SGD(m.parameters(),lr=1e-4)
 while 1:
  x=torch.randn(256,W,device=D);o.zero_grad();l=m(x).square().mean();l.backward();o.step()
def st(p):
 try:
  s=open(f"/proc/{p}/task/{p}/stat").read().rsplit(")",1)[1].split()
  return s[0],int(s[11])+int(s[12])
 except Exception as e:return "?",0
def duty(p,ev):
 while not ev.is_set():os.kill(p,19);time.sleep(.05);os.kill(p,18);time.sleep(.05)
def spy(ps):
 import subprocess as sp
 for p in ps:print(p.pid,st(p.pid)[0],sp.run([SPY,"dump","--nonblocking","--pid",str(p.pid)],capture_output=True,text=True).stdout.splitlines()[2:5],flush=True)
def phase(ps,name,secs):
 c=[{} for _ in ps];t0=[st(p.pid)[1] for p in ps];t=time.time()
 while time.time()-t<secs:
  for i,p in enumerate(ps):
   s=st(p.pid)[0];c[i][s]=c[i].get(s,0)+1
  time.sleep(.1)
 cpu=[round((st(p.pid)[1]-a)/secs,1) for p,a in zip(ps,t0)]
 print(name,"states",c,"main-thread cpu ticks/s",cpu,flush=True)
if __name__=="__main__":
 ps=[mp.get_context("spawn").Process(target=work,args=(r,)) for r in range(3)]
 [p.start() for p in ps];time.sleep(float(sys.argv[2]))
 phase(ps,"healthy",15);spy(ps)
 ev=threading.Event();th=threading.Thread(target=duty,args=(ps[2].pid,ev));th.start()
 phase(ps,"r2-held-50%",15);spy(ps);ev.set();th.join();os.kill(ps[2].pid,18)
 os.kill(ps[2].pid,19);time.sleep(2);phase(ps,"r2-frozen",8)
 [p.kill() for p in ps]
