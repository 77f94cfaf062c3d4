// Package subjects is the single owner of every NATS name iii uses: the
// subject a function id maps to, the streams, consumers and KV buckets of the
// engine and the harness, and the validation of every caller-supplied id that
// ends up inside one of those names.
//
// Nothing outside this package builds a subject by string concatenation. The
// function-id codec is injective and reversible, never yields an empty token
// and never yields a wildcard:
//
//	subj, _ := subjects.FunctionSubject("provider::anthropic::stream")
//	// subj == "iii.fn.provider.anthropic.stream"
//	id, _ := subjects.FunctionID(subj)
//	// id == "provider::anthropic::stream"
//
// Characters outside [A-Za-z0-9_-] inside a segment are written as '~' and two
// upper-case hex digits of each UTF-8 byte ("a.b" → "a~2Eb"). State keys use
// the same scheme with '=' as the escape (KV keys may not contain '~'), and
// '/' in a key becomes the KV token separator '.'.
//
// The package is pure (stdlib only) and fuzzed.
package subjects
