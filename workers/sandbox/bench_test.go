package sandbox

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// BenchmarkExecTrue measures sandbox::exec of `true` over the bus
// (validation, shim, cgroup leaf, bubblewrap's namespaces and mounts,
// output capture, disk check) and, in the same run, os/exec of /bin/true:
// p50 and p99 of each, and the ratio of the p50s.
func BenchmarkExecTrue(b *testing.B) {
	f := newFixture(b)
	sb := f.create(b, CreateRequest{SessionID: "bench"})
	ctx := context.Background()
	req := ExecRequest{SandboxID: sb.SandboxID, Command: Command{Argv: []string{"true"}}}
	var durs []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		began := time.Now()
		r, err := engine.Call[Result](ctx, f.e, ExecFunction, req)
		if err != nil || r.ExitCode != 0 {
			b.Fatalf("%+v %v", r, err)
		}
		durs = append(durs, time.Since(began))
	}
	b.StopTimer()
	base := make([]time.Duration, 0, len(durs))
	for range len(durs) {
		began := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		base = append(base, time.Since(began))
	}
	p50, p99 := percentile(durs, 50), percentile(durs, 99)
	b50, b99 := percentile(base, 50), percentile(base, 99)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	b.ReportMetric(ms(b50), "os-exec-p50-ms")
	b.ReportMetric(ms(b99), "os-exec-p99-ms")
	b.ReportMetric(float64(p50)/float64(b50), "x-os-exec-p50")
}

func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
