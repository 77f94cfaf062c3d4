// Package wire is iii's on-the-wire format: the payload codecs (msgpack and
// JSON, chosen by the Content-Type header) and the one catalog of error
// codes, with the error envelope every function answers with.
//
// Go workers send msgpack; any other client may send JSON, and a message
// without a Content-Type is JSON, so `nats req iii.fn.models.list '{}'`
// works. A reply uses the request's codec. A msgpack array is refused
// where a struct is wanted, at any depth, as a JSON array is (the msgpack
// library would fill the fields by position, and read [] as {}); so is an
// ext value where a map is wanted (the library would read the ext's
// payload as the map). Types with a msgpack decoder of their own,
// `msgpack:",as_array"` structs and interface values are left to their
// own reading.
//
// Errors travel as the NATS services convention (headers
// Nats-Service-Error and Nats-Service-Error-Code) plus a body
//
//	{"error":{"code":"invalid_payload","message":"...","retryable":false,"details":{}}}
//
// [ReplyWithin] builds that reply so that it fits the server's max payload
// (a long message is cut, details dropped), so an error quoting a large
// input still reaches its caller.
//
// [Decode] is the single place that turns a reply back into a Go error; the
// result matches the catalog's sentinels with errors.Is:
//
//	if errors.Is(err, wire.ErrFunctionNotFound) { ... }
package wire
