// Package web is the "web" worker module: it serves web::fetch, a model's
// way to read one resource of the public web.
//
//	web::fetch {url, max_bytes?, timeout_ms?}
//	  → {url, status, content_type, content, bytes, truncated, binary?, duration_ms}
//
// A call is one GET with the User-Agent [UserAgent], following at most
// [MaxRedirects] redirects. The body is read up to max_bytes (default
// [DefaultMaxBytes], lowered to the worker's ceiling) and returned as
// UTF-8 text: the charset is decoded best effort (BOM, Content-Type, an
// HTML <meta>; without one, UTF-8, or windows-1252 for HTML that is not
// valid UTF-8; invalid bytes become U+FFFD), and HTML is turned into
// readable text (scripts, styles and tags dropped, whitespace collapsed,
// headings "#", list items "- ", links [text](absolute url) resolved
// against the page or its first <base href>), cut at max_bytes as well:
// absolute links can make it longer than its markup.
// A body that is not text (by Content-Type, or sniffed when there is
// none) is not read: binary is true and content empty. The content is also
// cut to fit in one NATS message; truncated says when anything was cut. A
// status of 400 and more is an answer, not an error: the model sees it.
//
// # What is refused
//
// Bad input is invalid_payload: a url that is empty, longer than
// [MaxURLLength], not http or https, without a host, or with credentials
// (user:password@); timeout_ms outside 0..60000; a negative max_bytes.
//
// Unless private addresses are allowed ([WithAllowPrivate], setting
// "allow_private"), the fetcher connects only to public internet
// addresses. The check runs after DNS resolution, on the IP actually
// dialed (the transport's dialer resolves the name itself, drops refused
// addresses and dials the rest by IP; the socket's Control hook checks
// again), so a name that resolves to an internal address, DNS rebinding
// and a redirect to an internal host are refused alike, with the coded
// error forbidden naming the address and why. Refused: loopback
// (127/8, ::1), private (10/8, 172.16/12, 192.168/16, ULA fc00::/7),
// link-local (169.254/16 with the cloud metadata address, fe80::/10),
// unspecified (0/8, ::), multicast (224/4, ff00::/8), CGNAT (100.64/10),
// broadcast and reserved (240/4), the documentation, benchmarking and
// protocol-assignment ranges (in IPv6 2001:db8::/32, 3fff::/20 and
// 2001:2::/48; the rest of 2001::/23 holds Teredo and public anycast
// services and is allowed), SRv6 segment identifiers (5f00::/16), the
// discard and dummy prefixes (100::/64, 100:0:0:1::/64), deprecated
// site-local fec0::/10, and every IPv6 form that embeds one of these
// IPv4 addresses (IPv4-mapped, IPv4-compatible, NAT64 64:ff9b::/96, 6to4
// 2002::/16). No proxy from the
// environment is used: it would connect on the fetcher's behalf,
// unchecked. A redirect must itself be a valid http(s) URL (else
// forbidden); a sixth redirect ends the fetch (unavailable).
//
// Network failures (DNS, connection refused, TLS) are unavailable; a fetch
// that outlives timeout_ms (default [DefaultTimeout], at most [MaxTimeout])
// or its caller's deadline is timeout.
//
// # Lifecycle
//
// The module registers itself in init; a node starts it by name ("web").
// [Worker.Provision] reads the settings "allow_private" (bool) and
// "max_bytes" (the ceiling a call may ask for, default
// [DefaultMaxBytesLimit]); [Worker.Start] builds the [Fetcher] and
// registers web::fetch, with its skill document, on the engine worker
// "web"; [Worker.Close] ends fetches in flight and stops it. A [Fetcher]
// also works on its own, without NATS.
//
//	w := web.NewWorker()
//	if err := w.Start(ctx, e); err != nil { ... }
//	defer w.Close(ctx)
//	page, err := engine.Call[web.FetchResponse](ctx, e, web.FetchFunction, web.FetchRequest{URL: "https://example.com/"})
//
// From a shell:
//
//	nats req iii.fn.web.fetch '{"url":"https://example.com/"}'
package web
