package hook

// Merge folds replies (in arrival order) by rule, as [PublishCollect] does
// for [Result].Merged: see [FirstBlockWins], [FieldMerge] and
// [PipelineLastWins]; an unknown rule merges fields. The result is never
// nil and is a new map: changing it leaves the replies alone (values are
// shared, not copied deeply).
func Merge(rule MergeRule, replies []map[string]any) map[string]any {
	switch rule {
	case PipelineLastWins:
		if len(replies) == 0 {
			return map[string]any{}
		}
		return clone(replies[len(replies)-1])
	case FirstBlockWins:
		for _, r := range replies {
			if Blocks(r) {
				return clone(r)
			}
		}
	}
	return fieldMerge(replies)
}

// Blocks reports whether reply asks to block: its "block" is JSON true.
// Anything else ("true", 1, null) does not block.
func Blocks(reply map[string]any) bool {
	b, ok := reply["block"].(bool)
	return ok && b
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func fieldMerge(replies []map[string]any) map[string]any {
	switch len(replies) {
	case 0:
		return map[string]any{}
	case 1:
		return clone(replies[0])
	}
	n := 0
	for _, r := range replies {
		n = max(n, len(r))
	}
	out := make(map[string]any, n)
	for _, r := range replies {
		for k, v := range r {
			if _, set := out[k]; set && v == nil {
				// null is no answer, as the reply types decode it
				// ({"result":null} keeps the result): it overrode an
				// earlier hook's redaction or rewrite.
				continue
			}
			out[k] = v
		}
	}
	return out
}
