#!/bin/sh
# The image's entrypoint: `concilium "$@"` as the unprivileged user concilium (uid 10001).
# CONCILIUM_KEY=/path/to/node.key (a mounted, read-only key file, whatever its owner): the key is copied to the
# user's home with mode 0600 and owned by it, and `--key` points there. Started as root only for that copy;
# as any other user, it runs concilium directly.
set -eu
if [ "$(id -u)" = 0 ]; then
  if [ -n "${CONCILIUM_KEY:-}" ]; then
    install -o 10001 -g 10001 -m 600 "$CONCILIUM_KEY" /home/concilium/node.key
    set -- "$@" --key /home/concilium/node.key
  fi
  exec setpriv --reuid=10001 --regid=10001 --init-groups --reset-env concilium "$@"
fi
if [ -n "${CONCILIUM_KEY:-}" ]; then
  set -- "$@" --key "$CONCILIUM_KEY"
fi
exec concilium "$@"
