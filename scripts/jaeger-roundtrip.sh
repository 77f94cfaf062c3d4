#!/usr/bin/env bash
# One turn exported over OTLP to a real Jaeger (v2, all-in-one) and read
# back through Jaeger's query API. Jaeger is built from tools/jaeger, a
# module of its own (go.mod with a `tool` directive), so its dependencies
# never enter iii's module graph. The first build takes several minutes.
#
#   scripts/jaeger-roundtrip.sh
#
# Exits 0 and prints the trace's span names when Jaeger holds the turn's
# trace with run::start, the model call and the provider stream in it.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

echo "building jaeger (tools/jaeger) and iii…"
(cd tools/jaeger && go build -o "$work/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger)
go build -o "$work/iii" ./cmd/iii

"$work/jaeger" >"$work/jaeger.log" 2>&1 &
for _ in $(seq 100); do curl -fs http://127.0.0.1:16686/ >/dev/null 2>&1 && break; sleep 0.2; done

nats=nats://127.0.0.1:4299
OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=iii-roundtrip \
  "$work/iii" up --home "$work/home" --listen 127.0.0.1:4299 --http "" >"$work/iii.log" 2>&1 &
iii_pid=$!
for _ in $(seq 100); do "$work/iii" --nats $nats functions >/dev/null 2>&1 && break; sleep 0.2; done

"$work/iii" --nats $nats chat --session jaeger1 -m 'hello jaeger'
kill -INT $iii_pid # the node flushes its spans as it stops
wait $iii_pid || true

for _ in $(seq 50); do
  body=$(curl -fs "http://127.0.0.1:16686/api/traces?service=iii-roundtrip&tags=%7B%22iii.session.id%22%3A%22jaeger1%22%7D&limit=20" || true)
  if grep -q '"operationName":"run::start"' <<<"$body" && grep -q '"operationName":"chat echo"' <<<"$body" &&
     grep -q '"operationName":"provider::scripted::stream"' <<<"$body"; then
    echo "Jaeger holds the turn:"
    grep -o '"operationName":"[^"]*"' <<<"$body" | sort | uniq -c
    exit 0
  fi
  sleep 0.2
done
echo "Jaeger does not hold the turn's trace; its answer:" >&2
echo "${body:-<none>}" | head -c 2000 >&2
exit 1
