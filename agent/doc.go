// Package agent is the harness's wire vocabulary: the Go types of the
// messages, results, provider events, run requests and session events that
// SPEC.md §4–§6 defines, with the snake_case `json` tags the spec names.
// Both wire codecs (msgpack and JSON) read those tags, so one type serves Go
// workers and the `nats` CLI alike.
//
//   - [Message] and [Content]: the transcript (user, assistant and
//     function_result messages of text, image, thinking and function_call
//     blocks); [FunctionCall] is the view of a call block.
//   - [FunctionResult]: what a function returns to the model; [Denial] is
//     the details of a result the harness made up (denied, aborted,
//     interrupted).
//   - [ModelEvent]: one frame of a provider stream, ending with done or
//     error ([ErrorKind]).
//   - [RunStart]: the request of run::start.
//   - [Event]: one event of a session's event stream, and [TurnView], the
//     client's view of a run ([TurnState]).
//
// The package is pure: no I/O, and nothing of ours but the subjects id rule. Each request type has
// a Validate method whose errors wrap a sentinel of errors.go
// ([ErrInvalidRunStart], [ErrInvalidMessage], [ErrInvalidID],
// [ErrInvalidModelEvent]), so a function registered with engine.Typed
// answers bad input with invalid_payload.
//
// Values reachable from a message (content slices, arguments, details) are
// shared when a value is copied; treat them as immutable once built.
//
//	rs := agent.RunStart{
//		SessionID: "s1", Provider: "anthropic", Model: "claude-sonnet-4",
//		Messages: []agent.Message{agent.UserText("list my files", nowMs)},
//	}
//	if err := rs.Validate(); err != nil { ... } // wraps agent.ErrInvalidRunStart
package agent
