// Package fit cuts the answers of the sandbox's functions (sandbox::exec,
// shell::exec and the fs tools) to the bus's max payload in the caller's
// codec. Their own caps count raw bytes, but a JSON caller gets each
// control character, and each of '<', '>' and '&', as a six-byte escape,
// so an answer well under its cap can still be over the max payload: it
// would fail as internal, after the work was done.
//
// [Longest] finds how many items of a list (or bytes of a text) still fit
// by a binary search over the encoded answer; [Prefix] cuts a text at a
// rune boundary; [StringSize] measures a string in a codec.
//
//	n := fit.Longest(len(res.Matches), func(k int) bool {
//		r := res
//		r.Matches = res.Matches[:k]
//		b, _ := codec.Marshal(r)
//		return int64(len(b)) <= limit
//	})
package fit
