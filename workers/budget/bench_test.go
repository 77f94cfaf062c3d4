package budget

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// BenchmarkReserveSettle is the budget cost of one model call: a reserve
// and a settle over the bus (msgpack), against budgets=N matching budgets
// (N compare-and-sets each way) or none.
func BenchmarkReserveSettle(b *testing.B) {
	for _, n := range []int{0, 1, 2} {
		b.Run(fmt.Sprintf("budgets=%d", n), func(b *testing.B) {
			ns := enginetest.RunServer(b)
			e, _ := startWorker(b, ns)
			ctx := context.Background()
			scopes := []CreateRequest{
				{WorkspaceID: "W", CeilingUSD: 1e9, Period: PeriodMonth},
				{AgentID: "A", CeilingUSD: 1e9, Period: PeriodDay},
			}
			for _, c := range scopes[:n] {
				if _, err := engine.Call[Budget](ctx, e, CreateFunction, c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			i := 0
			start := time.Now()
			for b.Loop() {
				i++
				rid := fmt.Sprintf("r%d", i)
				r, err := engine.Call[ReserveResponse](ctx, e, ReserveFunction, ReserveRequest{WorkspaceID: "W", AgentID: "A", EstimatedUSD: 0.01, ReservationID: rid})
				if err != nil || len(r.Budgets) != n {
					b.Fatalf("reserve: %+v %v", r, err)
				}
				if n == 0 {
					continue
				}
				if _, err := engine.Call[SettleResponse](ctx, e, SettleFunction, SettleRequest{ReservationID: rid, ActualUSD: 0.005}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(i)/time.Since(start).Seconds(), "calls/s")
		})
	}
}

// BenchmarkReserveSettleParallel: callers=N concurrent callers on one
// budget, every reserve and settle contending for the same key.
func BenchmarkReserveSettleParallel(b *testing.B) {
	for _, callers := range []int{4, 16} {
		b.Run(fmt.Sprintf("callers=%d,budgets=1", callers), func(b *testing.B) {
			ns := enginetest.RunServer(b)
			e, _ := startWorker(b, ns)
			ctx := context.Background()
			if _, err := engine.Call[Budget](ctx, e, CreateFunction, CreateRequest{WorkspaceID: "W", CeilingUSD: 1e9, Period: PeriodMonth}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			// RunParallel runs parallelism × GOMAXPROCS goroutines.
			b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
			var seq atomic.Int64
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					rid := fmt.Sprintf("r%d", seq.Add(1))
					if _, err := engine.Call[ReserveResponse](ctx, e, ReserveFunction, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.01, ReservationID: rid}); err != nil {
						b.Error(err)
					} else if _, err := engine.Call[SettleResponse](ctx, e, SettleFunction, SettleRequest{ReservationID: rid, ActualUSD: 0.005}); err != nil {
						b.Error(err)
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
		})
	}
}
