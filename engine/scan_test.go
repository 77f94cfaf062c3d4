package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// ScanHeaders reads a subject's messages since a time, headers only, in
// order, stops when told, answers 0 for none, and leaves no consumer.
func TestScanHeaders(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js, err := jetstream.New(enginetest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SCAN", Subjects: []string{"scan.>"}})
	if err != nil {
		t.Fatal(err)
	}
	pub := func(subj string, i int) {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: nats.Header{"N": []string{fmt.Sprint(i)}}, Data: []byte("body")}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		pub("scan.a", i)
		pub("scan.b", i)
	}
	mid := time.Now()
	time.Sleep(20 * time.Millisecond)
	for i := 300; i < 310; i++ {
		pub("scan.a", i)
	}
	tests := []struct {
		name    string
		subject string
		since   time.Time
		stopAt  string // "" reads to the end
		want    int
		first   string
	}{
		{"all of a subject", "scan.a", time.Time{}, "", 310, "0"},
		{"since a time", "scan.a", mid, "", 10, "300"},
		{"stopped", "scan.a", time.Time{}, "5", 6, "0"},
		{"none since", "scan.b", mid, "", 0, ""},
		{"no such subject", "scan.c", time.Time{}, "", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var first string
			n, err := engine.ScanHeaders(ctx, s, tt.subject, tt.since, func(m jetstream.Msg, _ *jetstream.MsgMetadata) bool {
				if len(m.Data()) != 0 {
					t.Errorf("a body was read: %q", m.Data())
				}
				if first == "" {
					first = m.Headers().Get("N")
				}
				return m.Headers().Get("N") != tt.stopAt
			})
			if err != nil || n != tt.want || first != tt.first {
				t.Fatalf("read %d (first %q), %v; want %d (first %q)", n, first, err, tt.want, tt.first)
			}
		})
	}
	names := s.ConsumerNames(ctx)
	left := 0
	for range names.Name() {
		left++
	}
	if left != 0 {
		t.Fatalf("%d consumers left", left)
	}
}
