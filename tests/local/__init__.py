"""The local tier: node programs as processes, `connection: local` runs, loopback sockets; no root."""
