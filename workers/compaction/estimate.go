package compaction

import "github.com/iii-on-nats/iii/agent"

// ImageTokens is what one image block counts for ([agent.ImageTokens]).
const ImageTokens = agent.ImageTokens

// EstimateTokens is [agent.EstimateTokens]: the rule the worker and the
// orchestrator share.
func EstimateTokens(msgs []agent.Message) int { return agent.EstimateTokens(msgs) }

// MessageTokens is [agent.MessageTokens].
func MessageTokens(m agent.Message) int { return agent.MessageTokens(m) }

// UsedTokens is [agent.UsedTokens].
func UsedTokens(u agent.Usage) int { return agent.UsedTokens(u) }

// tokens is ceil(n / 4).
func tokens(n int) int { return (n + 3) / 4 }
