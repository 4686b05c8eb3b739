"""Private registries and the image's way to the nodes: whose credentials a pull uses, what a failed
pull means, and the image shared between the nodes.

`credentials.py` the credentials a node pulls with (Docker's own lookup, credHelpers, credsStore,
auths, over a config.json and `docker-credential-<name> get`: the node's own, or the controller's
per `container.registry_auth`); `pull_errors.py` a registry's or engine's refusal -> its cause and a
fix that works on that node (pure); `docker_replies.py` what a node's engine answers, read without
trusting its shape; `pulling.py` one node's pull and `image_pull.py` the `image_pull` check, asked of
every engine before `up` changes anything. `peers.py` shares the image between the nodes (who sends
to whom: the chain, then rounds); `relay.py` the relay program that carries it node to node (both
ends prove the transfer's key first), the commands that run it, and which layers a node already
holds; `loadcheck.py` the receiver's check between the relay and `docker load` (only the seed's
image, with the tag asked for, is kept)."""
