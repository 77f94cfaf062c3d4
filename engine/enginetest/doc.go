// Package enginetest starts what engine tests need: an embedded nats-server
// with JetStream on a random port in a temp dir, a connection to it, and an
// [engine.Engine] over that connection, all torn down by t.Cleanup.
//
//	func TestX(t *testing.T) {
//		t.Parallel()
//		e := enginetest.Engine(t)
//		...
//	}
package enginetest
