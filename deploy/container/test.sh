#!/usr/bin/env bash
# Runs the image that build.sh made, as CI does: `kxp demo` inside passes; the image has no
# shell; `kxp serve` inside becomes healthy by its own HEALTHCHECK, delivers a signed event to a
# receiver on this host, and exits 0 on SIGTERM. Loopback only (--network host, 127.0.0.1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
image=localhost/kxp:latest
name=kxp-image-test-$$
work=$(mktemp -d)
receiver_pid=
cleanup() {
    podman rm --force --time 0 "$name" >/dev/null 2>&1 || true
    [ -n "$receiver_pid" ] && kill "$receiver_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
run() { podman run --runtime /usr/sbin/runc --network host "$@"; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { # <what> <seconds> <command...>
    local what=$1 seconds=$2
    shift 2
    for _ in $(seq "$((seconds * 4))"); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.25
    done
    echo "waited ${seconds}s for $what" >&2
    return 1
}

echo "--- kxp demo inside the image"
run --rm "$image" demo

echo "--- no shell inside"
if run --rm --entrypoint /bin/sh "$image" -c true >/dev/null 2>&1; then
    echo "the image has a shell" >&2
    exit 1
fi

echo "--- kxp serve inside, delivering to a receiver on the host"
receiver_port=$(free_port)
python3 - "$receiver_port" "$work/received" <<'PY' &
import http.server, json, sys
port, out = int(sys.argv[1]), sys.argv[2]
class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        with open(out, "a") as f:
            f.write(json.dumps({"signature": self.headers.get("x-kxp-signature"), "body": json.loads(body)}) + "\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Receiver).serve_forever()
PY
receiver_pid=$!
port=$(free_port)
base="http://127.0.0.1:$port"
key=kxp_image_test_key
# podman runs the image's HEALTHCHECK on a systemd timer, and there is no systemd here: it says
# so on stderr (kept in podman.log), and the test runs the check itself (`podman healthcheck run`).
run --detach --name "$name" -e KXP_API_KEY="$key" -e KXP_LISTEN="127.0.0.1:$port" \
    "$image" serve --dev >/dev/null 2>>"$work/podman.log"
# The image's own HEALTHCHECK (kxp healthcheck on /readyz at KXP_LISTEN's port) turns healthy.
if ! wait_for "the container's health check" 60 podman healthcheck run "$name"; then
    podman healthcheck run "$name" || true
    podman logs "$name" >&2
    exit 1
fi
curl -fsS -H "authorization: Bearer $key" -H 'content-type: application/json' \
    -d "{\"url\": \"http://127.0.0.1:$receiver_port/hook\", \"skip_challenge\": true}" \
    "$base/v1/endpoints" >/dev/null
event=$(curl -fsS -H "authorization: Bearer $key" -H 'content-type: application/json' \
    -d '{"type": "payment.succeeded", "data": {"amount": 1200}}' "$base/v1/events" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
wait_for "the event to reach the receiver" 60 grep -q "\"$event\"" "$work/received"
grep "\"$event\"" "$work/received" | python3 -c '
import json, sys
line = json.loads(sys.stdin.readline())
assert line["signature"] and line["signature"].startswith("t="), line
assert line["body"]["type"] == "payment.succeeded", line'
echo "delivered $event, signed"

podman stop --time 40 "$name" >/dev/null 2>>"$work/podman.log"
status=$(podman inspect "$name" --format '{{.State.ExitCode}}')
if [ "$status" != 0 ]; then
    echo "kxp serve exited $status on SIGTERM; its log:" >&2
    podman logs "$name" >&2
    exit 1
fi
echo "--- the image passed: demo, no shell, healthy, delivered, exit 0 on SIGTERM"
