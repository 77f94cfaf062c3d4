package redact

import (
	"encoding/base64"
	"slices"
	"strings"
)

// span is a byte range [start, end) of a string to replace with Redacted.
type span struct{ start, end int }

// redactString returns s with every credential it holds replaced by
// Redacted: the whole string when it is an HTTP credential ("Bearer x"),
// else each credential in place, so a shell command or a header line stays
// readable around it.
func (r *Redactor) redactString(s string) string {
	if len(s) < 4 {
		return s
	}
	if isAuthValue(s) {
		return Redacted
	}
	var arr [8]span
	sp := arr[:0]
	sp = scanTokens(s, sp)
	sp = scanPEM(s, sp)
	sp = scanURLs(s, sp)
	sp = scanSchemes(s, sp)
	sp = r.scanAssignments(s, sp)
	sp = r.scanFlags(s, sp)
	if len(sp) == 0 {
		return s
	}
	return replaceSpans(s, sp)
}

// isAuthValue reports whether s is an Authorization header value: "Bearer"
// or "Basic" (any case), blanks, then one word that does not start with
// ':' or '=' ("Bearer: x" is a header line, which scanAssignments redacts
// to "Bearer: [redacted]"; were that a value, a second pass would redact
// it again and Value would not be idempotent).
func isAuthValue(s string) bool {
	t := strings.TrimSpace(s)
	for _, scheme := range [...]string{"bearer", "basic"} {
		if len(t) <= len(scheme) || !strings.EqualFold(t[:len(scheme)], scheme) || !isBlank(t[len(scheme)]) {
			continue
		}
		rest := strings.TrimLeft(t[len(scheme):], " \t")
		return rest != "" && rest[0] != ':' && rest[0] != '=' && !strings.ContainsAny(rest, " \t\r\n")
	}
	return false
}

// scanTokens finds API keys and tokens by their well-known shapes: sk-…
// (OpenAI, Anthropic, DeepSeek, OpenRouter; at least 20 bytes and not
// inside a word, so "task-…" is not one), AIza + 35 (Google), gsk_ (Groq)
// and xai- (xAI), the keys of providers the OpenAI-compatible worker
// serves; AKIA/ASIA + 16 (AWS access keys), ghp_/gho_/ghs_/ghu_/ghr_ and
// github_pat_ (GitHub), xox?- (Slack), JWTs (eyJ….….…) and the prefixed
// shapes of [tokenShapes].
func scanTokens(s string, sp []span) []span {
	for i := 0; i < len(s); i++ {
		end, c := prefixedEnd(s, i), s[i]
		if end > 0 {
			c = 0 // found: the shapes below start with other prefixes
		}
		switch c {
		case 's':
			if strings.HasPrefix(s[i:], "sk-") && (i == 0 || !isAlnum(s[i-1])) {
				if n := run(s, i+3, isKeyByte); 3+n >= 20 {
					end = i + 3 + n
				}
			}
		case 'A':
			if strings.HasPrefix(s[i:], "AKIA") || strings.HasPrefix(s[i:], "ASIA") {
				if run(s, i+4, isUpperOrDigit) >= 16 {
					end = i + 4 + run(s, i+4, isUpperOrDigit)
				}
			} else if strings.HasPrefix(s[i:], "AIza") && (i == 0 || !isAlnum(s[i-1])) {
				if n := run(s, i+4, isKeyByte); n >= 35 {
					end = i + 4 + n
				}
			}
		case 'g':
			if strings.HasPrefix(s[i:], "gsk_") && (i == 0 || !isAlnum(s[i-1])) {
				if n := run(s, i+4, isWordByte); n >= 20 {
					end = i + 4 + n
				}
			} else if strings.HasPrefix(s[i:], "github_pat_") {
				if n := run(s, i+11, isWordByte); n >= 20 {
					end = i + 11 + n
				}
			} else if len(s) > i+4 && s[i+1] == 'h' && strings.IndexByte("posur", s[i+2]) >= 0 && s[i+3] == '_' {
				if n := run(s, i+4, isWordByte); n >= 20 {
					end = i + 4 + n
				}
			}
		case 'x':
			if len(s) > i+5 && strings.HasPrefix(s[i:], "xox") && strings.IndexByte("abposre", s[i+3]) >= 0 && s[i+4] == '-' {
				if n := run(s, i+5, isSlackByte); n >= 10 {
					end = i + 5 + n
				}
			} else if strings.HasPrefix(s[i:], "xai-") && (i == 0 || !isAlnum(s[i-1])) {
				if n := run(s, i+4, isKeyByte); n >= 20 {
					end = i + 4 + n
				}
			}
		case 'e':
			if strings.HasPrefix(s[i:], "eyJ") {
				if end = jwtEnd(s, i); end == 0 {
					// No "eyJ" later in this run can start a JWT either.
					i += run(s, i, isB64URLByte) - 1
				}
			}
		}
		if end > i {
			sp = append(sp, span{i, end})
			i = end - 1
		}
	}
	return sp
}

// A tokenShape is a credential known by its prefix: at least min bytes
// that satisfy ok follow it. A shape whose prefix could end a longer word
// ("hf_" in "thf_…") must not start inside a word.
type tokenShape struct {
	prefix string
	min    int
	ok     func(byte) bool
}

// tokenShapes are the prefixed credentials of code hosts, package
// registries, payment and model APIs that a model's commands carry. Each
// prefix is specific enough that a run of min key bytes after it is not
// prose; none may start inside a word.
var tokenShapes = []tokenShape{
	{"hf_", 30, isAlnum}, // Hugging Face: hf_ + 34 letters
	// GitLab: personal, OAuth app, deploy, runner, trigger, feed, CI job,
	// incoming mail, agent, service account tokens. The newer routable ones
	// carry dots (glpat-….01.….).
	{"glpat-", 20, isDottedKeyByte}, {"gloas-", 20, isDottedKeyByte}, {"gldt-", 20, isDottedKeyByte},
	{"glrt-", 20, isDottedKeyByte}, {"glptt-", 20, isDottedKeyByte}, {"glft-", 20, isDottedKeyByte},
	{"glcbt-", 20, isDottedKeyByte}, {"glimt-", 20, isDottedKeyByte}, {"glagent-", 20, isDottedKeyByte},
	{"glsoat-", 20, isDottedKeyByte},
	// Stripe: secret and restricted keys, live and test; webhook secrets.
	{"sk_live_", 16, isAlnum}, {"sk_test_", 16, isAlnum}, {"rk_live_", 16, isAlnum}, {"rk_test_", 16, isAlnum},
	{"whsec_", 20, isB64Byte},
	{"npm_", 30, isAlnum},                                                        // npm: npm_ + 36
	{"pypi-AgE", 40, isKeyByte},                                                  // PyPI: a macaroon, pypi-AgEIcHlwaS5vcmc…
	{"ya29.", 20, isDottedKeyByte},                                               // Google OAuth access tokens
	{"xapp-", 20, isSlackByte},                                                   // Slack app-level tokens
	{"r8_", 30, isAlnum},                                                         // Replicate
	{"pplx-", 30, isAlnum},                                                       // Perplexity
	{"dop_v1_", 40, isAlnum}, {"doo_v1_", 40, isAlnum}, {"dor_v1_", 40, isAlnum}, // DigitalOcean
}

// shapesByFirst indexes tokenShapes by the first byte of their prefix, so
// each byte of a string is tried against a few prefixes, not all.
var shapesByFirst = func() (t [256][]tokenShape) {
	for _, sh := range tokenShapes {
		t[sh.prefix[0]] = append(t[sh.prefix[0]], sh)
	}
	return t
}()

// prefixedEnd returns where the credential of [tokenShapes] that starts at
// i ends, or 0. A trailing '.' of a dotted shape is the end of a sentence.
func prefixedEnd(s string, i int) int {
	for _, sh := range shapesByFirst[s[i]] {
		if !strings.HasPrefix(s[i:], sh.prefix) || i > 0 && isAlnum(s[i-1]) {
			continue
		}
		v := i + len(sh.prefix)
		n := run(s, v, sh.ok)
		for n > 0 && s[v+n-1] == '.' {
			n--
		}
		if n >= sh.min {
			return v + n
		}
	}
	return 0
}

// jwtEnd returns where the JWT (or JWE) starting at i ends, or 0: a header
// of at least 10 base64url bytes, a non-empty payload, and any number of
// further segments (the signature may be empty: alg "none").
func jwtEnd(s string, i int) int {
	n := run(s, i, isB64URLByte)
	if n < 10 || i+n >= len(s) || s[i+n] != '.' {
		return 0
	}
	j := i + n + 1
	m := run(s, j, isB64URLByte)
	if m == 0 || j+m >= len(s) || s[j+m] != '.' {
		return 0
	}
	j += m
	for j < len(s) && s[j] == '.' {
		j += 1 + run(s, j+1, isB64URLByte)
	}
	return j
}

// scanPEM finds private key blocks, from "-----BEGIN … PRIVATE KEY-----" to
// the end of the matching END line, or to the end of s when it is cut.
// Certificates and public keys are not secrets and stay.
func scanPEM(s string, sp []span) []span {
	for off := 0; ; {
		i := strings.Index(s[off:], "-----BEGIN ")
		if i < 0 {
			return sp
		}
		start := off + i
		labelEnd := strings.Index(s[start+11:], "-----")
		if labelEnd < 0 {
			return sp
		}
		label := s[start+11 : start+11+labelEnd]
		off = start + 11 + labelEnd + 5
		if !strings.Contains(label, "PRIVATE KEY") {
			continue
		}
		end := len(s)
		if e := strings.Index(s[off:], "-----END"); e >= 0 {
			if c := strings.Index(s[off+e+8:], "-----"); c >= 0 {
				end = off + e + 8 + c + 5
			}
		}
		sp = append(sp, span{start, end})
		off = end
	}
}

// scanURLs finds the password of URLs with user info
// (scheme://user:password@host): only the password is redacted, the user
// and host stay. A password with an unescaped '/' or '?' still counts
// (postgres://u:pa/ss@host): the last '@' before a blank ends it, unless
// what follows the ':' is a port ("https://host:8080/x?mail=a@b").
func scanURLs(s string, sp []span) []span {
	for off := 0; ; {
		i := strings.Index(s[off:], "://")
		if i < 0 {
			return sp
		}
		i += off
		off = i + 3
		if i == 0 || !isAlnum(s[i-1]) {
			continue // no scheme
		}
		rest := s[off:]
		if e := strings.Index(rest, "://"); e >= 0 {
			rest = rest[:e] // keeps the scan linear
		}
		if e := strings.IndexAny(rest, " \t\r\n\"'`<>"); e >= 0 {
			rest = rest[:e]
		}
		authority := rest
		if e := strings.IndexAny(rest, "/?#"); e >= 0 {
			authority = rest[:e]
		}
		loose := false
		at := strings.LastIndexByte(authority, '@')
		if at < 0 {
			if at = strings.LastIndexByte(rest, '@'); at < 0 {
				continue
			}
			loose = true
		}
		userinfo := rest[:at]
		colon := strings.IndexByte(userinfo, ':')
		if colon < 0 || strings.ContainsAny(userinfo[:colon], "/?#") {
			continue
		}
		pass := userinfo[colon+1:]
		if pass == "" || pass == Redacted {
			continue
		}
		if loose {
			if e := strings.IndexAny(pass, "/?#"); e > 0 && run(pass, 0, isDigit) == e {
				continue // host:port/path?x=a@b, not a password
			}
		}
		sp = append(sp, span{off + colon + 1, off + at})
	}
}

// scanSchemes finds HTTP credentials inside longer text: "Bearer <token>"
// where the token has at least 8 bytes with a digit or symbol, or at least
// 20 ("Bearer authentication" is prose), and "Basic <base64>" where the
// base64 decodes to "user:password".
func scanSchemes(s string, sp []span) []span {
	for i := 0; i+7 < len(s); i++ {
		if s[i] != 'b' && s[i] != 'B' || i > 0 && isAlnum(s[i-1]) {
			continue
		}
		for _, scheme := range [...]string{"bearer", "basic"} {
			n := len(scheme)
			if len(s) <= i+n || !strings.EqualFold(s[i:i+n], scheme) || !isBlank(s[i+n]) {
				continue
			}
			t := i + n
			for t < len(s) && isBlank(s[t]) {
				t++
			}
			e := t + run(s, t, isToken68Byte)
			for e < len(s) && s[e] == '=' {
				e++
			}
			if tok := s[t:e]; scheme == "bearer" && isBearerToken(tok) || scheme == "basic" && isBasicCredential(tok) {
				sp = append(sp, span{i, e})
				i = e - 1
			}
			break
		}
	}
	return sp
}

func isBearerToken(tok string) bool {
	if len(tok) >= 20 {
		return true
	}
	return len(tok) >= 8 && strings.IndexFunc(tok, func(r rune) bool { return r > 0x7f || !isLower(byte(r)) && !isUpper(byte(r)) }) >= 0
}

func isBasicCredential(tok string) bool {
	if len(tok) < 4 {
		return false
	}
	b, err := base64.StdEncoding.DecodeString(tok)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(tok); err != nil {
			return false
		}
	}
	return strings.IndexByte(string(b), ':') > 0
}

// scanAssignments finds values assigned to secret keys inside text:
// password=x, API_KEY=x, "token": "x", Authorization: Bearer x,
// {\"secret\":\"x\"}, and the operators of code and makefiles:
// password := "x", TOKEN ?= x, TOKEN += x, 'password' => 'x'. The key is
// any run of letters, digits, '_', '.' and '-' that [Redactor.IsSecretKey]
// accepts, or a URL query parameter key= or sig= ([isQueryKey]), not right
// after a '/' or '\' (a path like /etc/secret:ro is not an assignment).
// After '=' the value runs to a blank, '&', ';', ',', ')', '}' or a quote;
// after ':' (a header or YAML line) to the end of the line, ',', '}', ']'
// or a quote, or through the quoted string of a typed declaration
// (password: str = "x"); a quoted value runs to its closing quote. A number
// under a counting key (max_tokens=100), true, false and null are kept, as
// in [Value]. The "value:" of a name/value pair written as text is judged
// under the pair's name ([textPair]).
func (r *Redactor) scanAssignments(s string, sp []span) []span {
	var pair textPair
	var early earlyValue
	ls, lsAt := 0, 0 // ls is where the line of s[lsAt] starts
	for i := 1; i < len(s); i++ {
		c := s[i]
		if c != '=' && c != ':' {
			continue
		}
		if k := strings.LastIndexByte(s[lsAt:i], '\n'); k >= 0 {
			ls = lsAt + k + 1
		}
		lsAt = i
		next := byte(0)
		if i+1 < len(s) {
			next = s[i+1]
		}
		if c == ':' && (next == ':' || s[i-1] == ':' || next == '/' || next == '=') ||
			c == '=' && (next == '=' || strings.IndexByte("=!<>", s[i-1]) >= 0) {
			continue // := is taken at its '='
		}
		op, vs := i, i+1 // where the operator starts, where the value may
		if c == '=' && strings.IndexByte(":?+", s[i-1]) >= 0 {
			op-- // := ?= +=
		}
		if c == '=' && next == '>' {
			vs++ // =>
		}
		j := op
		for j > 0 && isBlank(s[j-1]) {
			j--
		}
		if j > 0 && isQuote(s[j-1]) {
			j--
			if j > 0 && s[j-1] == '\\' {
				j--
			}
		}
		ke := j
		for j > 0 && isIdentByte(s[j-1]) {
			j--
		}
		if j == ke || j > 0 && (s[j-1] == '/' || s[j-1] == '\\') {
			continue
		}
		// j..i holds no line break: ls is the key's line too.
		key := s[j:ke]
		secret := r.IsSecretKey(key)
		if !secret && c == ':' {
			switch {
			case isPairName(key):
				pair = r.newTextPair(s, j, vs, ls)
				if pair.name != "" {
					sp = early.claim(r, s, pair.name, j, ls, sp)
				}
				continue
			case strings.EqualFold(key, "value") && pair.holds(s, j, ls):
				key, secret = pair.name, true
			case strings.EqualFold(key, "value"):
				early = newEarlyValue(s, j, vs, ls)
				continue
			}
		}
		if !secret && !(c == '=' && ke == i && isQueryKey(s, j, ke)) {
			continue
		}
		if c == ':' {
			if bs, be := blockValue(s, j, vs); be > bs {
				if val := strings.TrimSpace(s[bs:be]); val != "" && !strings.HasPrefix(val, Redacted) {
					sp = append(sp, span{bs, be})
				}
				i = be - 1
				continue
			}
		}
		var end int
		sp, end = r.appendValue(s, key, vs, c, sp)
		i = max(i, end-1) // nothing in a value is a key; keeps the scan linear
	}
	return sp
}

// A textPair is the name of a name/value pair written as text that names a
// secret, as Kubernetes env vars are written in YAML
// ("- name: DB_PASSWORD⏎  value: x") or a JSON pair inside a string: the
// "value:" that follows on the same line, or below at the name's column
// with no line shallower in between (the same mapping), is judged under
// the name, as [Redactor.pairName] judges a decoded one.
type textPair struct {
	name    string // the secret key the pair names; "" for none
	line    int    // where the name's line starts
	col     int    // the column of the name's key
	checked int    // the lines from line to checked stay in the mapping; 0 until the first check
}

// maxPairName bounds how far a pair's name is looked for, so a long line of
// "name:" keys is still scanned in linear time.
const maxPairName = 256

// newTextPair reads the pair whose name key starts at key on the line
// starting at ls, with its value at or after v.
func (r *Redactor) newTextPair(s string, key, v, ls int) textPair {
	for v < len(s) && isBlank(s[v]) {
		v++
	}
	rest := s[v:min(len(s), v+maxPairName)]
	var name string
	switch {
	case rest != "" && isQuote(rest[0]):
		e := strings.IndexByte(rest[1:], rest[0])
		if e < 0 {
			return textPair{}
		}
		name = rest[1 : 1+e]
	case len(rest) > 1 && rest[0] == '\\' && isQuote(rest[1]): // JSON inside a JSON string
		e := strings.Index(rest[2:], rest[:2])
		if e < 0 {
			return textPair{}
		}
		name = rest[2 : 2+e]
	default:
		e := strings.IndexAny(rest, "\r\n,}]\"'`")
		if e < 0 {
			if v+len(rest) < len(s) {
				return textPair{}
			}
			e = len(rest)
		}
		name = strings.TrimSpace(rest[:e])
	}
	if !r.IsSecretKey(name) {
		return textPair{}
	}
	return textPair{name: name, line: ls, col: column(s, key, ls)}
}

// holds reports whether the "value" key that starts at key, on the line
// starting at ls, belongs to p's pair.
func (p *textPair) holds(s string, key, ls int) bool {
	switch {
	case p.name == "":
		return false
	case ls == p.line:
		return true // {name: DB_PASSWORD, value: x}, or JSON text
	}
	col := column(s, key, ls)
	if col != p.col || run(s, ls, isBlank) != col {
		return false // not first on its line, or another mapping's
	}
	if p.checked == 0 {
		p.checked = p.line + strings.IndexByte(s[p.line:ls], '\n') + 1
	}
	for line := p.checked; line < ls; {
		next := line + strings.IndexByte(s[line:ls], '\n') + 1
		indent := run(s, line, isBlank)
		if content := strings.TrimRight(s[line+indent:next-1], "\r"); content != "" && indent < p.col {
			*p = textPair{} // the mapping ended
			return false
		}
		line = next
	}
	p.checked = ls
	return true
}

// An earlyValue is the "value:" of a pair written as text before its name
// ("- value: x⏎  name: DB_PASSWORD", {value: x, name: X-Api-Key}): it is
// kept until a name naming a secret claims it — on the same line, or first
// on a line below at the value's column with no shallower line between —
// or a later "value:" replaces it.
type earlyValue struct {
	key     int  // where the value's key starts
	v       int  // just after its ':'; 0 for none
	line    int  // where its line starts
	col     int  // the column of its key
	first   bool // the key is first on its line (after blanks and list dashes)
	checked int  // the lines from line to checked stay in the mapping; 0 until the first check
}

func newEarlyValue(s string, key, v, ls int) earlyValue {
	col := column(s, key, ls)
	first := true
	for k := ls; k < ls+col; k++ {
		if !isBlank(s[k]) && s[k] != '-' {
			first = false
			break
		}
	}
	return earlyValue{key: key, v: v, line: ls, col: col, first: first}
}

// claim adds the span of e's value when the pair's name (a secret key),
// whose key starts at key on the line starting at ls, belongs to the same
// mapping. The value is looked for only before the name (before its line
// when it is on a line below), so each value is read once and the scan
// stays linear.
func (e *earlyValue) claim(r *Redactor, s, name string, key, ls int, sp []span) []span {
	if e.v == 0 {
		return sp // none
	}
	lim := key
	if ls != e.line {
		if !e.first || column(s, key, ls) != e.col || run(s, ls, isBlank) != e.col {
			return sp // not first on its line, or another mapping's
		}
		if e.checked == 0 {
			e.checked = e.line + strings.IndexByte(s[e.line:ls], '\n') + 1
		}
		for line := e.checked; line < ls; {
			next := line + strings.IndexByte(s[line:ls], '\n') + 1
			indent := run(s, line, isBlank)
			if content := strings.TrimRight(s[line+indent:next-1], "\r"); content != "" && indent < e.col {
				*e = earlyValue{} // the mapping ended
				return sp
			}
			line = next
		}
		lim = ls
	} else if lim > 0 && isQuote(s[lim-1]) {
		lim-- // the name's opening quote
		if lim > 0 && s[lim-1] == '\\' {
			lim--
		}
	}
	t, vkey, v := s[:lim], e.key, e.v
	*e = earlyValue{}
	if bs, be := blockValue(t, vkey, v); be > bs {
		if val := strings.TrimSpace(t[bs:be]); val != "" && !strings.HasPrefix(val, Redacted) {
			sp = append(sp, span{bs, be})
		}
		return sp
	}
	sp, _ = r.appendValue(t, name, v, ':', sp)
	return sp
}

// column is the column of the key that starts at key on the line starting
// at ls, counting its opening quote.
func column(s string, key, ls int) int {
	if key > ls && isQuote(s[key-1]) {
		return key - ls - 1
	}
	return key - ls
}

// isPairName reports whether k is the key of a pair's name (any case).
func isPairName(k string) bool {
	for _, pn := range pairNames {
		if strings.EqualFold(k, pn) {
			return true
		}
	}
	return false
}

// blockValue finds the value of a YAML key that starts at key (after its
// quote, if any) and whose ':' is just before v, when that value is on the
// lines below: the key is first on its line (after blanks and list dashes),
// and after the ':' comes the end of the line or a block scalar indicator
// (| or >, with its chomping and indentation marks). The value is the
// indicator and the lines that follow while they are indented deeper than
// the key (or blank): password: |⏎  hunter2. It returns the value's start
// and end, or 0, 0.
func blockValue(s string, key, v int) (int, int) {
	for v < len(s) && isBlank(s[v]) {
		v++
	}
	e := v
	if e < len(s) && (s[e] == '|' || s[e] == '>') {
		e++
		for e < len(s) && (s[e] == '-' || s[e] == '+' || isDigit(s[e])) {
			e++
		}
		for e < len(s) && isBlank(s[e]) {
			e++
		}
	}
	if e < len(s) && s[e] == '\r' {
		e++
	}
	if e >= len(s) || s[e] != '\n' {
		return 0, 0
	}
	lineStart := strings.LastIndexByte(s[:key], '\n') + 1
	col := key - lineStart
	if key > lineStart && isQuote(s[key-1]) {
		col--
	}
	for k := lineStart; k < lineStart+col; k++ {
		if !isBlank(s[k]) && s[k] != '-' {
			return 0, 0 // prose or code before the key: not YAML
		}
	}
	end := 0
	for line := e + 1; line < len(s); {
		next := len(s)
		if n := strings.IndexByte(s[line:], '\n'); n >= 0 {
			next = line + n
		}
		indent := run(s, line, isBlank)
		content := strings.TrimRight(s[line+indent:next], "\r")
		if content != "" {
			if indent <= col {
				break
			}
			end = line + indent + len(content)
		}
		line = next + 1
	}
	if end == 0 {
		return 0, 0
	}
	return v, end
}

// queryKeys name a secret only as a URL query parameter: Google APIs take
// their API key as ?key=, Azure SAS URLs carry their signature as &sig=.
// Elsewhere "key" names a map or state key, not a secret.
var queryKeys = []string{"key", "sig"}

// isQueryKey reports whether s[j:ke] is one of queryKeys right after the
// '?' or '&' of a URL's query.
func isQueryKey(s string, j, ke int) bool {
	if j == 0 || s[j-1] != '?' && s[j-1] != '&' {
		return false
	}
	for _, k := range queryKeys {
		if strings.EqualFold(s[j:ke], k) {
			return true
		}
	}
	return false
}

// scanFlags finds command-line flags with a secret name followed by their
// value: --password hunter2 (the --password=x form is an assignment).
func (r *Redactor) scanFlags(s string, sp []span) []span {
	for off := 0; ; {
		i := strings.Index(s[off:], "--")
		if i < 0 {
			return sp
		}
		i += off
		off = i + 2
		if i > 0 && !isBlank(s[i-1]) && !isQuote(s[i-1]) {
			continue
		}
		ke := off + run(s, off, isIdentByte)
		if ke == off || ke >= len(s) || !isBlank(s[ke]) {
			continue
		}
		v := ke
		for v < len(s) && isBlank(s[v]) {
			v++
		}
		if v == len(s) || s[v] == '-' || !r.IsSecretKey(s[off:ke]) {
			continue
		}
		var end int
		sp, end = r.appendValue(s, s[off:ke], v, ' ', sp)
		off = max(off, end)
	}
}

// appendValue adds the span of the value of key that starts at or after v
// (after the separator sep: '=', ':' or ' '), unless it is empty, already
// redacted, a number under a counting key, or true/false/null. It also
// returns where the value ends.
func (r *Redactor) appendValue(s, key string, v int, sep byte, sp []span) ([]span, int) {
	for v < len(s) && isBlank(s[v]) {
		v++
	}
	if v >= len(s) {
		return sp, v
	}
	var vs, ve int
	switch {
	case isQuote(s[v]):
		vs = v + 1
		ve = closingQuote(s, vs, s[v])
	case s[v] == '\\' && v+1 < len(s) && isQuote(s[v+1]): // JSON inside a JSON string
		vs = v + 2
		ve = len(s)
		if e := strings.Index(s[vs:], s[v:v+2]); e >= 0 {
			ve = vs + e
		}
	default:
		stop := " \t\r\n&;,)}\"'`"
		if sep == ':' {
			stop = "\r\n,}]\"'`"
		}
		vs = v
		ve = len(s)
		if e := strings.IndexAny(s[vs:], stop); e >= 0 {
			ve = vs + e
		}
		cut := ve
		for ve > vs && isBlank(s[ve-1]) {
			ve--
		}
		if sep == ':' && ve > vs && s[ve-1] == '=' && cut < len(s) && isQuote(s[cut]) {
			// A typed declaration, password: str = "x": the value runs
			// through the quoted string, closing quote included.
			ve = min(closingQuote(s, cut+1, s[cut])+1, len(s))
		}
	}
	val := s[vs:ve]
	switch {
	case val == "", strings.HasPrefix(Redacted, val) && strings.HasPrefix(s[vs:], Redacted),
		strings.EqualFold(val, "true"), strings.EqualFold(val, "false"), strings.EqualFold(val, "null"),
		isNumber(val) && isCountKey(key):
		return sp, ve
	}
	return append(sp, span{vs, ve}), ve
}

// closingQuote returns the index of the quote q that closes a quoted value
// starting at from, skipping backslash escapes, or len(s).
func closingQuote(s string, from int, q byte) int {
	for k := from; k < len(s); k++ {
		switch s[k] {
		case '\\':
			k++
		case q:
			return k
		}
	}
	return len(s)
}

// replaceSpans returns s with each span, merged with those it overlaps or
// touches, replaced by Redacted.
func replaceSpans(s string, sp []span) string {
	slices.SortFunc(sp, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	b.Grow(len(s))
	pos := 0
	for k := 0; k < len(sp); {
		start, end := sp[k].start, sp[k].end
		for k++; k < len(sp) && sp[k].start <= end; k++ {
			end = max(end, sp[k].end)
		}
		if start < pos {
			start = pos
		}
		b.WriteString(s[pos:start])
		b.WriteString(Redacted)
		pos = end
	}
	b.WriteString(s[pos:])
	return b.String()
}

// run returns how many bytes of s from i satisfy ok.
func run(s string, i int, ok func(byte) bool) int {
	n := 0
	for i+n < len(s) && ok(s[i+n]) {
		n++
	}
	return n
}

func isBlank(c byte) bool         { return c == ' ' || c == '\t' }
func isQuote(c byte) bool         { return c == '"' || c == '\'' || c == '`' }
func isKeyByte(c byte) bool       { return isAlnum(c) || c == '_' || c == '-' }
func isWordByte(c byte) bool      { return isAlnum(c) || c == '_' }
func isSlackByte(c byte) bool     { return isAlnum(c) || c == '-' }
func isDottedKeyByte(c byte) bool { return isKeyByte(c) || c == '.' }
func isB64Byte(c byte) bool       { return isAlnum(c) || c == '+' || c == '/' || c == '=' }
func isB64URLByte(c byte) bool    { return isAlnum(c) || c == '_' || c == '-' }
func isIdentByte(c byte) bool     { return isAlnum(c) || c == '_' || c == '.' || c == '-' }
func isUpperOrDigit(c byte) bool  { return isUpper(c) || isDigit(c) }
func isToken68Byte(c byte) bool   { return isAlnum(c) || strings.IndexByte("-._~+/", c) >= 0 }
