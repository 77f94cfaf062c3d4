// Package redact removes secrets from function arguments before they are
// shown to a model, a human or a log: the args_excerpt of a denial (SPEC §5)
// and anything else that echoes what a model asked a function to do.
//
// [Value] returns a redacted deep copy of a value as JSON or msgpack decode
// it; [Excerpt] returns its compact JSON, clipped to a byte budget so one long
// value cannot push the rest out; [IsSecretKey] is the key rule alone. The
// functions are pure and safe for concurrent use. Options ([WithExtraKeys],
// [WithMaxString], [WithMaxDepth], [WithMaxItems]) may be passed per call, or
// fixed once in a [Redactor] built with [New], which reports a bad option.
//
//	d.ArgsExcerpt = redact.Excerpt(call.Args, 512)
//	// {"api_key":"[redacted]","path":"/x"}
//
// # Secret keys
//
// A key is compared in lower case with everything but ASCII letters and
// digits removed ("X-Api-Key", "api_key" and "apiKey" are all "xapikey" or
// "apikey"). It names a secret when it contains one of password, passwd,
// passphrase, passcode, secret, token, apikey, accesskey, privatekey,
// privkey, signingkey, encryptionkey, authorization, cookie (so setcookie),
// credential, signature, bearer, jwt, accountkey or subscriptionkey
// (Azure's AccountKey= and Ocp-Apim-Subscription-Key) — but "token" only when
// not followed by "iz" (tokenizer, tokenize are names, not secrets) — or
// when one of its words (split at separators, case changes and
// letter/digit changes: "pinCode" is pin+code) is otp, totp, hotp, pin, pwd,
// pw or pass, or ends with "auth" (auth, basic_auth, oauth, proxyAuth; not
// author). Short words are matched whole because as substrings they hit
// spinner, mapping and footprint. "session_id" does not count: in this
// harness it names a session, not a cookie (cookies are caught by "cookie").
// Nor do "PWD" and "OLDPWD" spelled exactly so: they are the shell's
// working directory (an env dump, PWD=/src make); any other spelling
// ("pwd", a login form's password field, "MYSQL_PWD", "db_pw") is a secret.
//
// The value under a secret key is judged by its kind:
//   - a string, list or object is replaced whole by [Redacted] (the key is
//     kept, so a reader knows which field was hidden);
//   - null and booleans are kept: they carry no credential;
//   - a number is kept when the key counts something — its normalized form
//     contains "tokens", or one of its words is count, limit, max, min, num,
//     total, size, budget or used — and is redacted otherwise. So
//     "max_tokens": 1024, "tokens": 10 and "token_count": 3 stay, while
//     "pin": 1234, "otp": 123456 and "token": 42 do not. A string under a
//     counting key ("max_tokens": "1024") is still redacted.
//
// The "value" of a name/value pair is judged as if it were under the
// pair's name: in an object with a "value" key beside a "name", "key" or
// "header" key (any case) whose string names a secret, as Kubernetes env
// vars and the header lists of HAR files and HTTP tools are written
// ({"name": "DB_PASSWORD", "value": "[redacted]"}). The same holds in
// text: a "value:" after a name:, key: or header: naming a secret, on the
// same line ({name: X-Api-Key, value: x}, JSON inside a string) or first on
// a line below at the name's column with no shallower line between (the
// same YAML mapping: "- name: DB_PASSWORD⏎  value: x"), and so does a
// "value:" written before its name, on the same line ({value: x, name:
// X-Api-Key}) or with the name first on a line below at the value's
// column ("- value: x⏎  name: DB_PASSWORD").
//
// A reference to a secret is redacted like a secret: a Kubernetes
// secretKeyRef ({name: db, key: password}) is hidden whole because its key
// contains "secret" — the key rule cannot tell a reference from a value,
// and hiding which Secret is meant costs a reader little — while a
// configMapKeyRef, whose key names no secret, stays (its "key": "password"
// has no "value" beside it, so it is no name/value pair).
//
// # Secret values
//
// Every string, wherever it sits (under any key, in a list, at the top,
// and map keys themselves), is scanned for credentials:
//   - a whole string "Bearer <x>" or "Basic <x>" (an Authorization value)
//     becomes [Redacted];
//   - inside longer text, each credential is replaced in place, so a shell
//     command or a header line stays readable around it: sk-… API keys of at
//     least 20 bytes that do not start inside a word (OpenAI, Anthropic),
//     the keys of other providers the OpenAI-compatible worker serves
//     (Google AIza + 35, Groq gsk_…, xAI xai-…, none inside a word),
//     AKIA/ASIA AWS access keys, ghp_/gho_/ghs_/ghu_/ghr_/github_pat_ GitHub
//     tokens, xoxa/b/p/o/s/r/e- and xapp- Slack tokens, hf_ Hugging Face
//     tokens, glpat-/gldt-/glrt-/gloas-/glptt-/glft-/glcbt-/glimt-/glagent-/
//     glsoat- GitLab tokens, sk_live_/sk_test_/rk_live_/rk_test_/whsec_
//     Stripe keys, npm_ and pypi- registry tokens, ya29. Google OAuth access
//     tokens, r8_ (Replicate), pplx- (Perplexity), dop_/doo_/dor_v1_
//     (DigitalOcean) — each long enough after its prefix and not inside a
//     word —, JWTs (eyJ… with at least two dots), PEM private key blocks
//     (certificates stay), "Bearer <token>" and "Basic <base64 of
//     user:password>";
//   - the password of a URL (scheme://user:password@host → the user and
//     host stay);
//   - values assigned to a secret key inside text (same key rule and
//     number rule as above): password=x, export API_KEY=x, "token": "x",
//     Authorization: Bearer x, --password x, the operators of code and
//     makefiles ('password' => 'x', password := "x", TOKEN ?= x,
//     TOKEN += x), typed declarations (password: str = "x"), and the block
//     of a YAML key that is first on its line with its value on the lines
//     below, indented deeper ("password: |" or "password:" alone, then the
//     lines: all of them go); and the URL query parameters key= and sig=
//     (?key= carries Google API keys, &sig= an Azure SAS signature; "key"
//     outside a query names a map key and stays).
//
// Scanning text is heuristic: it errs towards redacting too much (a
// "password: " line in prose loses the rest of the line). It does not
// look for high-entropy strings without a known shape, nor for credentials
// encoded in base64 or split across strings, nor for short-flag forms
// (curl -u user:password, mysql -ppassword): under an innocent key, a
// credential without a known shape, name or URL survives.
//
// Redaction is for showing and logging. Do not show a human a redacted
// value to approve: the hidden part is exactly what could make a call
// dangerous.
//
// # Other Go values
//
// Besides the decoded shapes (map[string]any, []any, map[any]any, string,
// float64, json.Number, integers, bool, nil) any Go value is accepted and
// never panics: json.RawMessage is decoded; []byte, and a json.Number that
// is not a number, become strings; an
// error becomes its message; structs, maps, slices and pointers go through
// encoding/json (struct fields are matched by their json names, and []byte
// fields become base64, which is not scanned); chans, funcs and complex
// numbers are printed with fmt; what encoding/json refuses becomes
// "[unsupported <type>]". Lists and objects nested deeper than the max
// depth become [Elided], which also stops a Go map that contains itself.
package redact
