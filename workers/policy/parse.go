package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Limits of a policy file.
const (
	// MaxFileBytes bounds a policy file.
	MaxFileBytes = 1 << 20
	// MaxRules bounds the rules of a policy.
	MaxRules = 10_000
	// MaxConstraints bounds the args constraints of one rule.
	MaxConstraints = 64
	// MaxPathSegments bounds the dot-separated segments of a constraint key.
	MaxPathSegments = 16
	// MaxRegexLen bounds a matches regex in bytes.
	MaxRegexLen = 4096
	// MaxReasonLen bounds a rule's reason in bytes.
	MaxReasonLen = 1024
)

// Version is the only policy file version.
const Version = 1

var explicitIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Parse reads a policy file (see the package documentation for the
// format). It is strict: an unknown key, a wrong type, a version other
// than 1, an empty or malformed pattern, a regex or condition that does not
// compile, YAML anchors, aliases and tags, or a second YAML document are
// errors, each a [*ParseError] naming the rule index and line. Options set
// the evaluation limits of the returned policy.
func Parse(data []byte, opts ...Option) (*Policy, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return parse(data, o)
}

func parse(data []byte, o options) (p *Policy, err error) {
	defer func() {
		// The YAML and CEL parsers are not ours: a panic there is a
		// rejected file, not a crashed gate.
		if r := recover(); r != nil {
			p, err = nil, &ParseError{Rule: -1, Msg: fmt.Sprintf("parser panicked: %v", r)}
		}
	}()
	if len(data) > MaxFileBytes {
		return nil, &ParseError{Rule: -1, Msg: fmt.Sprintf("file is %d bytes; the limit is %d", len(data), MaxFileBytes)}
	}
	if !utf8.Valid(data) {
		return nil, &ParseError{Rule: -1, Msg: "file is not valid UTF-8"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ParseError{Rule: -1, Msg: "file is empty; want version: 1 and rules"}
		}
		return nil, &ParseError{Rule: -1, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &ParseError{Rule: -1, Line: extra.Line, Msg: "more than one YAML document"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &ParseError{Rule: -1, Msg: "file is not one YAML document"}
	}
	ps := parser{o: o, ids: map[string]int{}, regex: newRegexBudget(o.regexLimit)}
	return ps.top(doc.Content[0])
}

type parser struct {
	o     options
	ids   map[string]int // explicit id -> rule index
	regex *regexBudget   // the policy's regexes, sized before they compile
}

func errAt(rule int, n *yaml.Node, format string, args ...any) *ParseError {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &ParseError{Rule: rule, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// plain refuses the YAML features a policy has no use for: anchors and
// aliases (a rule must say what it does where it is) and explicit tags.
func plain(rule int, n *yaml.Node) error {
	if n.Kind == yaml.AliasNode {
		return errAt(rule, n, "YAML aliases are not allowed")
	}
	if n.Anchor != "" {
		return errAt(rule, n, "YAML anchors are not allowed")
	}
	if n.Tag != "" && n.Tag != "!" && !strings.HasPrefix(n.Tag, "!!") {
		return errAt(rule, n, "%s is read as a YAML tag; quote it: \"%s\"", n.Tag, n.Tag)
	}
	return nil
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "a string"
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a bool"
		case "!!null":
			return "null"
		default:
			return n.ShortTag()
		}
	}
	return "an alias"
}

// str reads a string scalar.
func str(rule int, n *yaml.Node, what string) (string, error) {
	if err := plain(rule, n); err != nil {
		return "", err
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", errAt(rule, n, "%s must be a string, not %s", what, describe(n))
	}
	return n.Value, nil
}

// pairs walks a mapping's keys and values, refusing non-string and
// duplicate keys.
func pairs(rule int, n *yaml.Node, what string, fn func(key string, k, v *yaml.Node) error) error {
	if err := plain(rule, n); err != nil {
		return err
	}
	if n.Kind != yaml.MappingNode {
		return errAt(rule, n, "%s must be a mapping, not %s", what, describe(n))
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key, err := str(rule, k, what+" key")
		if err != nil {
			return err
		}
		if seen[key] {
			return errAt(rule, k, "%s has the key %q twice", what, key)
		}
		seen[key] = true
		if err := plain(rule, v); err != nil {
			return err
		}
		if err := fn(key, k, v); err != nil {
			return err
		}
	}
	return nil
}

func (ps *parser) top(root *yaml.Node) (*Policy, error) {
	var version, rules *yaml.Node
	err := pairs(-1, root, "the top level", func(key string, k, v *yaml.Node) error {
		switch key {
		case "version":
			version = v
		case "rules":
			rules = v
		default:
			return errAt(-1, k, "unknown key %q (want version and rules)", key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if version == nil {
		return nil, errAt(-1, root, "version is missing (want version: %d)", Version)
	}
	if version.Kind != yaml.ScalarNode || version.ShortTag() != "!!int" {
		return nil, errAt(-1, version, "version must be the integer %d, not %s", Version, describe(version))
	}
	if v, err := strconv.ParseInt(version.Value, 10, 64); err != nil || v != Version {
		return nil, errAt(-1, version, "version %s is not supported (want %d)", version.Value, Version)
	}
	if rules == nil {
		return nil, errAt(-1, root, "rules is missing (use rules: [] for a policy where every call needs approval)")
	}
	if rules.Kind != yaml.SequenceNode {
		return nil, errAt(-1, rules, "rules must be a list, not %s", describe(rules))
	}
	if len(rules.Content) > MaxRules {
		return nil, errAt(-1, rules, "%d rules; the limit is %d", len(rules.Content), MaxRules)
	}
	p := &Policy{rules: make([]*rule, 0, len(rules.Content)), o: ps.o}
	for i, n := range rules.Content {
		r, err := ps.rule(i, n)
		if err != nil {
			return nil, err
		}
		p.rules = append(p.rules, r)
	}
	return p, nil
}

func (ps *parser) rule(i int, n *yaml.Node) (*rule, error) {
	if err := plain(i, n); err != nil {
		return nil, err
	}
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		return ps.stringRule(i, n)
	case n.Kind == yaml.MappingNode:
		return ps.objectRule(i, n)
	}
	return nil, errAt(i, n, "a rule must be a string (\"fn\", \"!fn\") or a mapping, not %s", describe(n))
}

func (ps *parser) stringRule(i int, n *yaml.Node) (*rule, error) {
	r := &rule{id: fmt.Sprintf("rule-%d", i), action: Allow}
	pattern := n.Value
	if strings.HasPrefix(pattern, "!") {
		r.action, pattern = Deny, pattern[1:]
	}
	g, err := compileGlob(pattern)
	if err != nil {
		return nil, errAt(i, n, "%v", err)
	}
	r.glob = g
	return r, nil
}

func (ps *parser) objectRule(i int, n *yaml.Node) (*rule, error) {
	r := &rule{id: fmt.Sprintf("rule-%d", i)}
	var fnNode, actionNode *yaml.Node
	err := pairs(i, n, "a rule", func(key string, k, v *yaml.Node) error {
		switch key {
		case "id":
			id, err := str(i, v, "id")
			if err != nil {
				return err
			}
			if err := ps.explicitID(i, v, id); err != nil {
				return err
			}
			r.id = id
		case "function":
			s, err := str(i, v, "function")
			if err != nil {
				return err
			}
			g, err := compileGlob(s)
			if err != nil {
				return errAt(i, v, "%v", err)
			}
			r.glob, fnNode = g, v
		case "action":
			s, err := str(i, v, "action")
			if err != nil {
				return err
			}
			switch a := Action(s); a {
			case Allow, Deny, NeedsApproval:
				r.action, actionNode = a, v
			default:
				return errAt(i, v, "action %q is not allow, deny or needs_approval", s)
			}
		case "args":
			return pairs(i, v, "args", func(key string, k, v *yaml.Node) error {
				if len(r.constraints) == MaxConstraints {
					return errAt(i, k, "more than %d args constraints", MaxConstraints)
				}
				c, err := ps.constraint(i, key, k, v)
				if err != nil {
					return err
				}
				r.constraints = append(r.constraints, c)
				return nil
			})
		case "when":
			s, err := str(i, v, "when")
			if err != nil {
				return err
			}
			c, err := compileWhenIn(s, &ps.o, ps.regex)
			if err != nil {
				return errAt(i, v, "%v", err)
			}
			r.when = c
		case "reason":
			s, err := str(i, v, "reason")
			if err != nil {
				return err
			}
			if len(s) > MaxReasonLen {
				return errAt(i, v, "reason is %d bytes; the limit is %d", len(s), MaxReasonLen)
			}
			r.reason = s
		default:
			return errAt(i, k, "unknown key %q (want id, function, action, args, when, reason)", key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if fnNode == nil {
		return nil, errAt(i, n, "function is missing")
	}
	if actionNode == nil {
		return nil, errAt(i, n, "action is missing (allow, deny or needs_approval)")
	}
	// The regexes were compiled before the action was known (YAML keys come
	// in any order); deny and needs_approval rules let '.' match newlines.
	for _, c := range r.constraints {
		if c.matches != "" {
			re, err := anchor(c.matches, r.action != Allow, ps.o.regexMatch)
			if err != nil {
				return nil, errAt(i, n, "args %q: %v", c.key, err)
			}
			c.re = re
		}
	}
	var spelled []string
	for _, c := range r.constraints {
		spelled = append(spelled, c.String())
	}
	if r.when != nil {
		spelled = append(spelled, "when: "+r.when.src)
	}
	r.spelled = strings.Join(spelled, ", ")
	return r, nil
}

func (ps *parser) explicitID(i int, n *yaml.Node, id string) error {
	switch {
	case !explicitIDRE.MatchString(id):
		return errAt(i, n, "id %q must be 1 to 64 of A-Z a-z 0-9 _ . - and start with a letter or digit", id)
	case strings.HasPrefix(id, "rule-"):
		return errAt(i, n, "id %q: ids starting with rule- are the automatic ones", id)
	case reservedIDs[id]:
		return errAt(i, n, "id %q is reserved for the gate's own decisions", id)
	}
	if prev, ok := ps.ids[id]; ok {
		return errAt(i, n, "id %q is already the id of rules[%d]", id, prev)
	}
	ps.ids[id] = i
	return nil
}

func (ps *parser) constraint(i int, key string, k, v *yaml.Node) (*constraint, error) {
	c := &constraint{key: key, path: strings.Split(key, ".")}
	if len(c.path) > MaxPathSegments {
		return nil, errAt(i, k, "args key %q has more than %d segments", key, MaxPathSegments)
	}
	for _, seg := range c.path {
		if seg == "" {
			return nil, errAt(i, k, "args key %q has an empty segment", key)
		}
	}
	var re *yaml.Node
	err := pairs(i, v, fmt.Sprintf("args %q", key), func(op string, _, v *yaml.Node) error {
		switch op {
		case "equals":
			val, err := scalarValue(i, v)
			if err != nil {
				return err
			}
			c.hasEquals, c.equals = true, val
		case "matches":
			s, err := str(i, v, "matches")
			if err != nil {
				return err
			}
			if s == "" {
				return errAt(i, v, "matches is empty")
			}
			if len(s) > MaxRegexLen {
				return errAt(i, v, "matches is %d bytes; the limit is %d", len(s), MaxRegexLen)
			}
			// Validate alone first: a regex that parses on its own cannot
			// close the anchoring group around it ("a)|(b"). It compiles
			// once the rule's action is known, after it is sized.
			if err := parseRegex(s); err != nil {
				return errAt(i, v, "%v", err)
			}
			if err := ps.regex.take(s); err != nil {
				return errAt(i, v, "args %q: %v", key, err)
			}
			c.matches, re = s, v
		default:
			return errAt(i, v, "args %q: unknown test %q (want equals or matches)", key, op)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !c.hasEquals && re == nil {
		return nil, errAt(i, v, "args %q has neither equals nor matches", key)
	}
	return c, nil
}

// scalarValue reads an equals value as a canonical scalar.
func scalarValue(i int, n *yaml.Node) (any, error) {
	if n.Kind != yaml.ScalarNode {
		return nil, errAt(i, n, "equals must be a string, number or bool, not %s", describe(n))
	}
	switch n.ShortTag() {
	case "!!str":
		return n.Value, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, errAt(i, n, "equals: %v", err)
		}
		return b, nil
	case "!!int":
		var x int64
		if err := n.Decode(&x); err == nil {
			return x, nil
		}
		var u uint64
		if err := n.Decode(&u); err == nil {
			return canonUint(u), nil
		}
		return nil, errAt(i, n, "equals %s is out of range", n.Value)
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, errAt(i, n, "equals: %v", err)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, errAt(i, n, "equals must be a finite number, not %s", n.Value)
		}
		c, _ := canonFloat(f)
		return c, nil
	}
	return nil, errAt(i, n, "equals must be a string, number or bool, not %s", describe(n))
}

// anchor compiles a matches regex (RE2 syntax) so that it must match the
// whole value: ^(?:re)$, where $ is the end of the text (never before a
// final newline). With dotNL, '.' also matches '\n' — deny and
// needs_approval rules use it so that a second line cannot hide a match.
// It matches texts within budget (boundedRegexp).
func anchor(src string, dotNL bool, budget uint64) (*boundedRegexp, error) {
	if err := parseRegex(src); err != nil {
		return nil, err
	}
	open := "^(?:"
	if dotNL {
		open = "^(?s:"
	}
	re, err := compileBounded(open+src+")$", src, budget)
	if err != nil {
		return nil, fmt.Errorf("matches %q does not compile when anchored: %v", src, err)
	}
	return re, nil
}

// parseRegex checks that a matches regex parses, without compiling it.
func parseRegex(src string) error {
	if _, err := syntax.Parse(src, syntax.Perl); err != nil {
		return fmt.Errorf("matches %q does not compile: %v", src, err)
	}
	return nil
}
