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

// A batch direct get hands on every stored message, those whose own
// headers include one named "Status" too: such a message (any client may
// publish one) was taken for the end-of-batch status, the batch cut
// there and the read failed unavailable with its value as the status.
func TestDirectGetBatchStoredStatusHeader(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	for i, status := range []string{"", "204", "404", "500", ""} {
		msg := &nats.Msg{Subject: fmt.Sprintf("s.%d", i), Data: []byte{byte('a' + i)}, Header: nats.Header{}}
		if status != "" {
			msg.Header.Set("Status", status)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		body    string
		want    int
		pending uint64
	}{
		{"whole", `{"seq":1,"next_by_subj":"s.>","batch":10}`, 5, 0},
		{"cut", `{"seq":1,"next_by_subj":"s.>","batch":3}`, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, end, err := engine.DirectGetBatch(ctx, nc, "S", []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want || end.Pending != tc.pending {
				t.Fatalf("got %d messages, pending %d; want %d, pending %d", len(got), end.Pending, tc.want, tc.pending)
			}
			for i, m := range got {
				if string(m.Data) != string(rune('a'+i)) {
					t.Fatalf("message %d is %q", i, m.Data)
				}
			}
		})
	}
}
