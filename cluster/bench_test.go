package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkKVPut measures a KV Put on a 3-node cluster, from a node that
// is not necessarily the bucket leader, for R1 and R3 buckets. It reports
// the p50 and p99 latency besides ns/op.
func BenchmarkKVPut(b *testing.B) {
	nodes, formed := threeNodes(b)
	b.Logf("cluster formed in %v", formed)
	_, js := connect(b, nodes[0])
	ctx := context.Background()
	for _, r := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=3,replicas=%d", r), func(b *testing.B) {
			kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: fmt.Sprintf("bench%d", r), Replicas: r})
			if err != nil {
				b.Fatal(err)
			}
			val := make([]byte, 256)
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				if _, err := kv.Put(ctx, fmt.Sprintf("k%d", i%1000), val); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
