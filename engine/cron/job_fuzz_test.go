package cron

import (
	"bytes"
	"testing"
	"time"
)

// FuzzDecodeJob: a job definition as the scheduler's watch reads it from
// the jobs bucket (any client may `nats kv put` there) never panics the
// decoder, the validation or the first Next; what decodes and validates
// re-encodes to a job that decodes and compiles the same.
func FuzzDecodeJob(f *testing.F) {
	for _, s := range []string{
		`{"id":"j1","expression":"*/5 * * * *","function_id":"a::b"}`,
		`{"id":"j2","expression":"@every 1h","function_id":"a::b","data":{"n":12345678901234567890,"f":1.5,"l":[1,{"x":null}]},"timezone":"Europe/Paris"}`,
		`{"id":"j3","expression":"0 0 29 2 *","function_id":"a::b","timezone":"../../etc/passwd"}`,
		`{"id":"j4","expression":"0 0 * * 7","function_id":"a::b","timezone":"Local"}`,
		`{"id":"","expression":"","function_id":""}`,
		`{"data":1e400}`,
		`[]`, `null`, `"x"`, ``,
	} {
		f.Add([]byte(s), int64(1700000000))
	}
	f.Fuzz(func(t *testing.T, data []byte, unix int64) {
		j, err := decodeJob(data)
		if err != nil {
			return
		}
		x, err := j.compile(time.UTC)
		if err != nil {
			return
		}
		u := uint64(unix)
		_ = x.Next(time.Unix(int64(u%(430*365*24*3600)), 0))
		b, err := encodeJob(j)
		if err != nil {
			t.Fatalf("valid job %+v does not encode: %v", j, err)
		}
		again, err := decodeJob(b)
		if err != nil {
			t.Fatalf("own encoding %s does not decode: %v", b, err)
		}
		if _, err := again.compile(time.UTC); err != nil {
			t.Fatalf("own encoding %s does not compile: %v", b, err)
		}
		if b2, _ := encodeJob(again); !bytes.Equal(b, b2) {
			t.Fatalf("unstable encoding:\n%s\n%s", b, b2)
		}
	})
}
