package compaction

import (
	"math"

	"github.com/iii-on-nats/iii/agent"
)

// ImageTokens is what one image block counts for ([agent.ImageTokens]).
const ImageTokens = agent.ImageTokens

// EstimateTokens is [agent.EstimateTokens]: the rule the worker and the
// orchestrator share.
func EstimateTokens(msgs []agent.Message) int { return agent.EstimateTokens(msgs) }

// MessageTokens is [agent.MessageTokens].
func MessageTokens(m agent.Message) int { return agent.MessageTokens(m) }

// UsedTokens is [agent.UsedTokens].
func UsedTokens(u agent.Usage) int { return agent.UsedTokens(u) }

// bytesPerToken is the estimate's rule ([agent.EstimateTokens]): a token
// is four bytes of text.
const bytesPerToken = 4

// tokens is the estimate of n bytes of text: ceil(n / 4).
func tokens(n int) int { return (n + bytesPerToken - 1) / bytesPerToken }

// tokenBytes is the inverse of tokens: the bytes of text that t tokens
// estimate at most (tokens(tokenBytes(t)) == t), saturating instead of
// overflowing.
func tokenBytes(t int) int {
	if t <= 0 {
		return 0
	}
	if t > math.MaxInt/bytesPerToken {
		return math.MaxInt
	}
	return t * bytesPerToken
}
