// Package httpbody guards the provider workers against the HTTP responses
// of a broken or hostile server: a body too long to hold, or a server that
// accepts the connection and then sends nothing. The SDKs the providers
// use read a response body whole to decode it, and wait as long as the
// caller's context lets them; the wrappers here bound both.
//
//   - [Truncate] cuts a body at n bytes: past them it reads as ended (an
//     error response, which is classified by its status whatever its body).
//   - [Limit] fails a body longer than n bytes with a [*TooLargeError]
//     ([ErrTooLarge]) once it proves longer, so a caller can tell a cut
//     body from a whole one.
//   - [Events] fails a text/event-stream body once one event (the lines up
//     to a blank line) proves longer than n bytes: the SDKs' decoders
//     gather an event whole, with no bound of their own.
//   - [Idle] times each read of a body with a timer, so that a server
//     silent for the idle timeout is noticed, while time the reader spends
//     elsewhere between reads is not counted.
//   - [TruncateErrors] and [Watch] are the same as SDK middlewares: both
//     SDKs' option.Middleware is an alias of [Middleware].
//
// Closing a wrapped body closes the one below, which drops the connection
// when it was not read to its end rather than draining the rest.
//
// A request whose server may stay silent, with its context cancelled by
// the timer:
//
//	ctx, cancel := context.WithCancelCause(ctx)
//	idle := time.AfterFunc(d, func() { cancel(errStalled) })
//	idle.Stop() // Watch arms it while the request waits
//	defer idle.Stop()
//	err := client.Get(ctx, path, nil, &out, option.WithMiddleware(httpbody.Watch(idle, d, maxBody)))
package httpbody
