package topic_test

import (
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/topic"
)

// FuzzConsumerName: never panics, yields a legal JetStream consumer name,
// and two different (topic, function) pairs never share one.
func FuzzConsumerName(f *testing.F) {
	f.Add("a_b", "c", "a", "b_c")
	f.Add("orders", "billing::on_order", "orders~", "billing::on_order")
	f.Add("t", "x.y::z", "t", "x~2Ey::z")
	f.Add("a", "b::c", "a", "b~~c")
	f.Fuzz(func(t *testing.T, t1, f1, t2, f2 string) {
		n1, err1 := topic.ConsumerName(t1, f1)
		n2, err2 := topic.ConsumerName(t2, f2)
		for _, n := range []string{n1, n2} {
			if n != "" && (len(n) > 255 || strings.ContainsAny(n, " \t\r\n.*>/\\")) {
				t.Fatalf("illegal consumer name %q", n)
			}
		}
		if err1 == nil && err2 == nil && n1 == n2 && (t1 != t2 || f1 != f2) {
			t.Fatalf("(%q, %q) and (%q, %q) share consumer %q", t1, f1, t2, f2, n1)
		}
	})
}
