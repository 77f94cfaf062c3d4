package turn

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

// BenchmarkTurn runs whole runs through the machine: New, then every input
// of a run with the given number of parallel calls per model answer, with
// the outbox delivered after each input. It reports the inputs per run and
// the size of the largest record written, in JSON.
func BenchmarkTurn(b *testing.B) {
	for _, calls := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("calls=%d", calls), func(b *testing.B) {
			var cs []agent.Content
			var ids []string
			for i := range calls {
				id := fmt.Sprintf("c%d", i)
				ids = append(ids, id)
				cs = append(cs, call(id, "fs::read", map[string]any{"path": "/tmp/" + id}))
			}
			ins := []Input{Provisioned{}}
			if calls > 0 {
				ins = append(ins, ModelDone{answer("", cs...)}, CallsStarted{IDs: ids})
				for _, id := range ids {
					ins = append(ins, CallDone{ID: id, Result: agent.TextResult("a.txt\nb.txt")})
				}
				ins = append(ins, SteeringDrained{})
			}
			ins = append(ins, ModelDone{answer("done")}, SteeringDrained{})
			var maxRecord int
			run := func(measure bool) {
				rec, _, err := New(runStart(0), testRun, t0)
				if err != nil {
					b.Fatal(err)
				}
				for _, in := range ins {
					if rec, _, err = Apply(Delivered(rec), in, t0); err != nil {
						b.Fatal(err)
					}
					if measure {
						bs, _ := json.Marshal(rec)
						maxRecord = max(maxRecord, len(bs))
					}
				}
			}
			run(true)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				run(false)
			}
			b.ReportMetric(float64(len(ins)), "inputs/run")
			b.ReportMetric(float64(maxRecord), "record_bytes")
		})
	}
}
