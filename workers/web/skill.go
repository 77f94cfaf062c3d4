package web

// fetchSkill is the skill document of web::fetch.
const fetchSkill = "---\n" +
	"title: Fetch a web page\n" +
	"description: web::fetch GETs one public http(s) URL and returns its status, content type and content as text; HTML comes back as readable text with links as [text](url).\n" +
	"---\n" +
	`# web::fetch

Read one resource from the public web: an article, documentation, a README,
a JSON API answer, a raw text file. One call is one HTTP GET (redirects are
followed, at most 5); the answer is the final response, whatever its status.

## When to use it

- You need the current content of a URL you know (from the user, from a
  search result, from a link in a page you fetched before).
- To follow a link from a fetched page, fetch the URL inside its
  ` + "`[text](url)`" + `: links are already absolute.

Not for: hosts on the local or a private network (refused), pages behind a
login (no cookies, no credentials), forms or APIs that need POST (GET only),
binary files (you get ` + "`binary: true`" + ` and no content).

## Arguments

| field | | |
|---|---|---|
| ` + "`url`" + ` | required | absolute ` + "`http://`" + ` or ` + "`https://`" + ` URL, at most 4096 bytes, no ` + "`user:password@`" + ` |
| ` + "`max_bytes`" + ` | optional | bytes of body to read; default 1048576 (1 MiB); the worker lowers it to its ceiling (8 MiB unless configured) |
| ` + "`timeout_ms`" + ` | optional | budget of the whole fetch, 1 to 60000; default 15000 |

## Result

| field | |
|---|---|
| ` + "`url`" + ` | final URL, after redirects |
| ` + "`status`" + ` | HTTP status code |
| ` + "`content_type`" + ` | the Content-Type header (sniffed when the server sent none) |
| ` + "`content`" + ` | the body as UTF-8 text; HTML turned into text: scripts, styles and tags removed, headings as ` + "`#`" + `, list items as ` + "`-`" + `, table cells separated by ` + "` | `" + `, links as ` + "`[text](url)`" + ` |
| ` + "`bytes`" + ` | body bytes read, before conversion |
| ` + "`truncated`" + ` | the body, or the text made of an HTML page, was longer than ` + "`max_bytes`" + `, or the text was cut to fit one bus message (about 1 MiB) |
| ` + "`binary`" + ` | present and true when the body is not text (image, PDF, archive...): ` + "`content`" + ` is empty |
| ` + "`duration_ms`" + ` | time taken |

A status of 400 or more is NOT an error: it is an answer. Read ` + "`content`" + `
(an error page often says why) and decide: 404 means the URL is wrong, 403
or 401 that the page is not public, 429 or 5xx that retrying later may
work.

## Examples

` + "```json" + `
{"url": "https://example.com/"}
` + "```" + `
→
` + "```json" + `
{"url": "https://example.com/", "status": 200, "content_type": "text/html",
 "content": "Example Domain\n\n# Example Domain\n\nThis domain is for use in illustrative examples in documents. ...\n\n[More information...](https://www.iana.org/domains/example)",
 "bytes": 1256, "truncated": false, "duration_ms": 212}
` + "```" + `

A large page, read only in part and quickly:

` + "```json" + `
{"url": "https://example.com/big.txt", "max_bytes": 65536, "timeout_ms": 5000}
` + "```" + `

From a shell: ` + "`nats req iii.fn.web.fetch '{\"url\":\"https://example.com/\"}'`" + `

## Errors

| code | meaning | what to do |
|---|---|---|
| ` + "`invalid_payload`" + ` | the url is missing, too long, not http(s), has no host or carries credentials; timeout_ms outside 0..60000; max_bytes negative | fix the arguments |
| ` + "`forbidden`" + ` | the host resolves to an internal address (loopback, private network, link-local incl. cloud metadata 169.254.169.254, CGNAT, multicast...), or a redirect led there or to a non-http(s) URL | do not retry: the address is refused by design |
| ` + "`timeout`" + ` | no complete answer within timeout_ms | retry once with a larger timeout_ms, or give up |
| ` + "`unavailable`" + ` | DNS failure, connection refused or reset, TLS error, more than 5 redirects, the body broke off | check the URL; retry later if ` + "`retryable`" + ` is true |
`
