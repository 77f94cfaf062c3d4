package compaction

import "github.com/iii-on-nats/iii/agent"

// cut is where a compaction splits the messages after the previous
// summary: msgs[:index] are summarized, msgs[index:] are kept verbatim.
type cut struct {
	// index is the first kept message; 0 means nothing to compact.
	index int
	// split is set when the kept messages start at an assistant message
	// inside the newest user turn ([WithSplitTurns]).
	split bool
	// lastUser is the index of the newest user message, -1 when none.
	lastUser int
}

// chooseCut picks the cut of msgs (the messages after the previous
// summary, oldest first; tok[i] = MessageTokens(msgs[i])) for keepTokens:
//
//   - A cut never falls on a function result, nor between a function call
//     and its result (a user message sent while a call ran stays with it).
//   - The kept part starts at a user message: the oldest one whose tail
//     (it and everything after it) fits in keepTokens; when none fits,
//     the newest user message that may start a tail, so the newest user
//     message is always kept.
//   - With splitTurns, when that tail is more than twice keepTokens (one
//     huge agent turn), or there is no user message at all, the kept part
//     starts instead at an assistant message after the newest user
//     message: the oldest whose tail fits, else the newest.
//
// index 0 means there is nothing older than the cut to compact.
func chooseCut(msgs []agent.Message, tok []int, keepTokens int, splitTurns bool) cut {
	n := len(msgs)
	c := cut{lastUser: -1}
	if n == 0 {
		return c
	}
	open := crossings(msgs)
	tail := make([]int, n+1)
	for i := n - 1; i >= 0; i-- {
		tail[i] = tail[i+1] + tok[i]
	}
	userCut := -1
	for i := 0; i < n; i++ {
		if msgs[i].Role != agent.RoleUser {
			continue
		}
		c.lastUser = i
		if open[i] {
			continue
		}
		if userCut < 0 || tail[userCut] > keepTokens {
			userCut = i
		}
	}
	if userCut >= 0 && (tail[userCut] <= 2*keepTokens || !splitTurns) {
		c.index = max(userCut, 0)
		return c
	}
	if !splitTurns {
		return c
	}
	asstCut := -1
	for j := c.lastUser + 1; j < n; j++ {
		if j == 0 || msgs[j].Role != agent.RoleAssistant || open[j] {
			continue
		}
		if asstCut < 0 || tail[asstCut] > keepTokens {
			asstCut = j
		}
	}
	switch {
	case asstCut > 0:
		c.index, c.split = asstCut, true
	case userCut > 0:
		c.index = userCut
	}
	return c
}

// crossings reports, for each index i, whether a cut before msgs[i] would
// separate a function call (in msgs[:i]) from its result (in msgs[i:]).
// A result answers the newest earlier call with its id.
func crossings(msgs []agent.Message) []bool {
	n := len(msgs)
	diff := make([]int, n+1)
	calls := map[string]int{}
	for k := range msgs {
		m := &msgs[k]
		switch m.Role {
		case agent.RoleAssistant:
			for _, b := range m.Content {
				if b.Type == agent.ContentFunctionCall {
					calls[b.ID] = k
				}
			}
		case agent.RoleFunctionResult:
			if a, ok := calls[m.FunctionCallID]; ok && a < k {
				// Cuts a+1 .. k would leave the call behind.
				diff[a+1]++
				diff[k+1]--
			}
		}
	}
	open := make([]bool, n)
	run := 0
	for i := 0; i < n; i++ {
		run += diff[i]
		open[i] = run > 0
	}
	return open
}
