"""What `docker load` may keep of a relayed image: the check that stands between the relay and the
engine on every receiving node (issue 34, finding 3).

The relay proves both ends hold the transfer's key; this proves the bytes are the image asked
for. CHECK (a Python program of the standard library, run by the node's python3) reads the relayed
tar, passes the layers on to `docker load` as they come (the engine acts on nothing before the tar
ends) and holds back the files that name images and tags (manifest.json, index.json, repositories)
until the whole stream is in. It refuses the stream unless: every member is a file or directory of
`docker save`'s layouts; every blob is the content its name says (sha256) and so is the config;
manifest.json names exactly one image, the expected config (the seed's image ID), with no tag but
the one asked for; `repositories` and index.json (OCI layout) name that image and tag only.

Why refuse, not load and clean up: what a load leaves behind (another tag, an untagged image, a
layer) would have to be found and removed from an engine that other users share, and a tag, once
there, can be used before it is removed. A refused stream ends broken (not short: Go's tar reader
takes a stream that stops between two members for a whole archive), so `docker load` fails before
it tags or loads anything. Layers' contents are checked by `docker load` itself against the
config's diff IDs (the config is the one verified here).
"""
from __future__ import annotations

CHECK = r'''
import hashlib, io, json, re, sys, tarfile
expected, repo_tag, full_name, tag = sys.argv[1].split(":")[-1], sys.argv[2], sys.argv[3], sys.argv[4]
HEX = "[0-9a-f]{64}"
LAYOUT = re.compile("({0}|{0}/(VERSION|json|layer\\.tar)|{0}\\.json|blobs|blobs/sha256|blobs/sha256/{0}|"
                    "manifest\\.json|index\\.json|oci-layout|repositories)".format(HEX))
HELD, HELD_MAX, SMALL_MAX, SMALL_TOTAL = ("manifest.json", "index.json", "repositories"), 4 << 20, 1 << 20, 16 << 20
out = sys.stdout.buffer


def refuse(why, cut=False):
    # a broken end, not a short one: `docker load` must fail before it keeps anything
    out.write(b"clusterctl-check: refused" + b"\0" * 75)
    out.flush()
    sys.exit("clusterctl-check: %s: %s; docker load keeps nothing of it"
             % ("the stream was cut" if cut else "refused the relayed image", why))


class Hashing:
    def __init__(self, data, keep):
        self.data, self.digest, self.kept = data, hashlib.sha256(), io.BytesIO() if keep else None

    def read(self, size=-1):
        part = self.data.read(size)
        self.digest.update(part)
        if self.kept is not None:
            self.kept.write(part)
        return part


def parsed(text, what):
    try:
        return json.loads(text)
    except ValueError:
        refuse("%s is not JSON" % what)


def verify_manifest(held, digests):
    if "manifest.json" not in held:
        refuse("no manifest.json")
    manifest = parsed(held["manifest.json"][1], "manifest.json")
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        refuse("manifest.json names %s images, not one" % (len(manifest) if isinstance(manifest, list) else "no"))
    config = manifest[0].get("Config")
    if config not in (expected + ".json", "blobs/sha256/" + expected) or config not in digests:
        refuse("its image is %.80r, not sha256:%s (the seed's)" % (config, expected[:12]))
    tags = manifest[0].get("RepoTags") or []
    if not isinstance(tags, list) or [t for t in tags if t != repo_tag]:
        refuse("it carries other tags than %s: %.200r" % (repo_tag, tags))


def verify_others(held, small):
    repositories = parsed(held["repositories"][1], "repositories") if "repositories" in held else {}
    if not isinstance(repositories, dict) or not all(isinstance(tags, dict) for tags in repositories.values()) or \
            [r for r, tags in repositories.items() for t in tags if "%s:%s" % (r, t) != repo_tag]:
        refuse("repositories names other images: %.200r" % (repositories,))
    index = parsed(held["index.json"][1], "index.json") if "index.json" in held else {"manifests": []}
    listed = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(listed, list) or len(listed) > 1 or not all(isinstance(m, dict) for m in listed):
        refuse("index.json names several images")
    for entry in listed:
        names = entry.get("annotations") or {}
        if names.get("io.containerd.image.name", full_name) != full_name or \
                names.get("org.opencontainers.image.ref.name", tag) != tag:
            refuse("index.json names another image: %.200r" % names)
        blob = small.get(str(entry.get("digest", "")).split(":")[-1])
        target = parsed(blob, "the index's manifest") if blob is not None else None
        if not isinstance(target, dict) or (target.get("config") or {}).get("digest") != "sha256:" + expected:
            refuse("index.json points at another image than sha256:%s" % expected[:12])


def main():
    try:
        stream = tarfile.open(fileobj=sys.stdin.buffer, mode="r|", bufsize=1 << 20)
    except tarfile.TarError:
        refuse("nothing arrived", cut=True)
    writer = tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, bufsize=1 << 20, copybufsize=1 << 20)
    digests, held, small, kept = {}, {}, {}, 0
    try:
        for member in stream:
            name = member.name
            if not LAYOUT.fullmatch(name) or not (member.isfile() or member.isdir()):
                refuse("a member docker save does not write: %.100r" % name)
            if member.isdir():
                writer.addfile(member)
                continue
            data = stream.extractfile(member)
            if name in HELD:  # what names images and tags: passed on only once the whole stream is checked
                if member.size > HELD_MAX:
                    refuse("%s of %d bytes" % (name, member.size))
                held[name] = (member, data.read())
                continue
            keep = member.size <= SMALL_MAX and kept + member.size <= SMALL_TOTAL
            hashing = Hashing(data, keep)
            writer.addfile(member, hashing)
            digests[name] = hashing.digest.hexdigest()
            if (name.startswith("blobs/sha256/") and digests[name] != name[13:]) or \
                    (name.endswith(".json") and "/" not in name and digests[name] != name[:-5]):
                refuse("%s is not the content its name says" % name)
            if keep:
                small[digests[name]], kept = hashing.kept.getvalue(), kept + member.size
    except (tarfile.TarError, OSError, EOFError) as exc:
        refuse("a damaged or cut stream (%s)" % exc, cut=True)
    verify_manifest(held, digests)
    verify_others(held, small)
    for member, data in held.values():
        writer.addfile(member, io.BytesIO(data))
    writer.close()
    out.flush()


main()
'''


def saved_names(image: str) -> tuple[str, str, str]:
    """The names `docker save IMAGE` writes for a tagged IMAGE: manifest.json's RepoTags (the familiar
    form, `ubuntu:22.04`), the OCI index's image name (`docker.io/library/ubuntu:22.04`) and its tag.
    A reference without a tag means `:latest` (as docker reads it); one with a digest has no tag."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    repository, tag = (name.rsplit(":", 1) if ":" in last else (name, "" if digest else "latest"))
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        domain, path = first, rest
    else:
        domain, path = "docker.io", repository
    if domain in ("docker.io", "index.docker.io"):
        domain = "docker.io"
        path = path if "/" in path else "library/" + path
        familiar = path[len("library/"):] if path.startswith("library/") and path.count("/") == 1 else path
    else:
        familiar = f"{domain}/{path}"
    if not tag:
        return "", "", ""
    return f"{familiar}:{tag}", f"{domain}/{path}:{tag}", tag


def check_args(image: str, expected_id: str) -> tuple[str, ...]:
    """CHECK's argv after the program: the expected image ID and the names it may carry."""
    return (expected_id, *saved_names(image))


def save_reference(image: str) -> str:
    """What the sender saves: the tagged reference (`docker save repo` with no tag saves every tag of it)."""
    return saved_names(image)[0] or image

