package placement_test

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// benchCluster is two members in child processes on one embedded server,
// started by the first benchmark and stopped by TestMain: starting a
// member costs a second, far more than the benchmark itself.
var benchCluster struct {
	once  sync.Once
	err   error
	dir   string
	ns    *server.Server
	nc    *nats.Conn
	procs []*proc
	runs  int
}

func startBenchCluster() ([]*proc, error) {
	bc := &benchCluster
	bc.once.Do(func() {
		if bc.dir, bc.err = os.MkdirTemp("", "placement-bench-"); bc.err != nil {
			return
		}
		bc.ns, bc.err = server.NewServer(&server.Options{
			Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: bc.dir,
			JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 256 << 20, NoLog: true, NoSigs: true,
		})
		if bc.err != nil {
			return
		}
		bc.ns.Start()
		if !bc.ns.ReadyForConnections(10 * time.Second) {
			bc.err = errors.New("bench: server not ready")
			return
		}
		if bc.nc, bc.err = nats.Connect(bc.ns.ClientURL()); bc.err != nil {
			return
		}
		bc.procs, bc.err = spawnProcs(bc.nc, bc.ns.ClientURL(), false, "b0", "b1")
	})
	return bc.procs, bc.err
}

func closeBenchCluster() error {
	bc := &benchCluster
	var errs []error
	for _, p := range bc.procs {
		errs = append(errs, p.stop())
	}
	if bc.nc != nil {
		bc.nc.Close()
	}
	if bc.ns != nil {
		bc.ns.Shutdown()
		bc.ns.WaitForShutdown()
	}
	if bc.dir != "" {
		errs = append(errs, os.RemoveAll(bc.dir))
	}
	return errors.Join(errs...)
}

// BenchmarkActivation measures, inside member b0 of a two-member cluster,
// the first call to a fresh grain (activation: KV read, placement request,
// KV create, spawn, the call itself) split by where the grain landed, and
// a second call to the same grain (cached PID). One op is one grain.
func BenchmarkActivation(b *testing.B) {
	ps, err := startBenchCluster()
	if err != nil {
		b.Fatal(err)
	}
	benchCluster.runs++
	b.ResetTimer()
	var r ctlResp
	if err := ps[0].req("bench", ctlReq{ID: fmt.Sprintf("bench%d", benchCluster.runs), N: b.N}, &r, 10*time.Minute); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	s := r.Bench
	if s.Local > 0 {
		b.ReportMetric(float64(s.LocalNs)/float64(s.Local)/1e3, "local-µs/activation")
		b.ReportMetric(float64(s.LocalMaxNs)/1e3, "local-max-µs")
	}
	if s.Remote > 0 {
		b.ReportMetric(float64(s.RemoteNs)/float64(s.Remote)/1e3, "remote-µs/activation")
		b.ReportMetric(float64(s.RemMaxNs)/1e3, "remote-max-µs")
	}
	if s.Warm > 0 {
		b.ReportMetric(float64(s.WarmNs)/float64(s.Warm)/1e3, "warm-µs/call")
	}
	if failed := 2*b.N - s.Local - s.Remote - s.Warm; failed > 0 {
		b.Fatalf("%d calls failed", failed)
	}
}
