package hook

import "errors"

// Sentinel errors.
var (
	// ErrInvalidRequest is wrapped by every error of [Request.Validate]: a
	// topic that is not a function-id-like name, an unknown merge rule, or
	// a timeout, expected-replies count or quiescence out of range.
	ErrInvalidRequest = errors.New("hook: invalid request")
	// ErrPublishFailed is wrapped by the error of [PublishCollect] when the
	// hook never reached the bus: an invalid request, a closed or draining
	// connection, a payload over the server's max payload or one that does
	// not encode. The [Result] then has PublishFailed set; a caller guarding
	// a function call must deny it.
	ErrPublishFailed = errors.New("hook: publish failed")
	// ErrInvalidReply is wrapped by the error of [Result.Bind] when the
	// merged reply does not fit the expected shape.
	ErrInvalidReply = errors.New("hook: invalid reply")
)
