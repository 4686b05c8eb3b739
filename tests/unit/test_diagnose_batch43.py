"""Message classes met in the misses of issue 51's batch 43 after its first score (bench/first_scores/batch-43.md),
each with the real lines that met it (their pages in `# source` comments) and what the class must not take."""
from __future__ import annotations

from clusterctl.diagnose import diagnose_text

# source: https://github.com/PaddlePaddle/PaddleClas/issues/268 (batch-43e/02): the CPU package shadowing paddlepaddle-gpu
PADDLE_CPU_PACKAGE = """\
2020-09-08 09:14:59 INFO: classes_num : 7
2020-09-08 09:14:59 INFO: epochs : 2
2020-09-08 09:14:59 INFO: image_shape : [3, 224, 224]
2020-09-08 09:14:59 INFO: ls_epsilon : 0.1
2020-09-08 09:14:59 INFO: mode : train
2020-09-08 09:14:59 INFO: model_save_dir : ./output/
2020-09-08 09:14:59 INFO: pretrained_model : ./output/ResNet200_vd/best_model
2020-09-08 09:14:59 INFO: save_interval : 1
2020-09-08 09:14:59 INFO: topk : 2
2020-09-08 09:14:59 INFO: total_images : 1635
2020-09-08 09:14:59 INFO: use_mix : True
2020-09-08 09:14:59 INFO: valid_interval : 1
2020-09-08 09:14:59 INFO: validate : True
2020-09-08 09:14:59 ERROR: You are using paddlepaddle cpu version! Please try to install paddlepaddle-gpu to run model on GPU.
INFO 2020-09-08 01:15:03,836 utils.py:269] terminate all the procs
ERROR 2020-09-08 01:15:03,836 utils.py:413] ABORT!!! Out of all 1 trainers, the trainer process with rank=[0] was aborted. Please check its log.
INFO 2020-09-08 01:15:06,839 utils.py:269] terminate all the procs
"""
# source: https://github.com/apache/mxnet/issues/3611 (batch-43e/05): a libmxnet.so built without the distributed store
MXNET_WITHOUT_DIST_KVSTORE = """\
[bt] (7) python(PyEval_EvalFrameEx+0x98d) [0x5244dd]
[bt] (8) python(PyEval_EvalCodeEx+0x2b1) [0x555551]
[bt] (9) python(PyEval_EvalFrameEx+0x7e8) [0x524338]
[bt] (10) python(PyEval_EvalCodeEx+0x2b1) [0x555551]
[bt] (11) python(PyEval_EvalFrameEx+0x1a10) [0x525560]
[bt] (12) python() [0x567d14]
[bt] (13) python(PyRun_FileExFlags+0x92) [0x465bf4]
[bt] (14) python(PyRun_SimpleFileExFlags+0x2ee) [0x46612d]
[bt] (15) python(Py_Main+0xb5e) [0x466d92]
[bt] (16) /lib/x86_64-linux-gnu/libc.so.6(__libc_start_main+0xf5) [0x7ff26a81df45]
[bt] (17) python() [0x577c2e]
Traceback (most recent call last):
  File "/home/net/mxnet/example/image-classification/train_mnist.py", line 78, in <module>
    fit.fit(args, sym, get_mnist_iter)
  File "/home/net/mxnet/example/image-classification/common/fit.py", line 97, in fit
    kv = mx.kvstore.create(args.kv_store)
  File "/usr/local/lib/python2.7/dist-packages/mxnet/kvstore.py", line 403, in create
    ctypes.byref(handle)))
  File "/usr/local/lib/python2.7/dist-packages/mxnet/base.py", line 75, in check_call
    raise MXNetError(py_str(_LIB.MXGetLastError()))
mxnet.base.MXNetError: [13:07:50] src/kvstore/kvstore.cc:37: compile with USE_DIST_KVSTORE=1 to use dist_device_sync
Stack trace returned 18 entries:
"""


def test_a_framework_saying_its_own_build_lacks_what_the_job_uses_is_that_build():
    for text in (PADDLE_CPU_PACKAGE, MXNET_WITHOUT_DIST_KVSTORE):
        first = diagnose_text(text)[0]
        assert first.cause == "platform_backend_unsupported" and "shadows" in first.fix, first


def test_a_build_flag_only_mentioned_in_a_command_line_is_not_a_build_refusal():
    assert all(f.cause != "platform_backend_unsupported"
               for f in diagnose_text("+ make -j8 USE_DIST_KVSTORE=1 USE_CUDA=1\nRuntimeError: boom\n"))
