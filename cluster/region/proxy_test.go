package region_test

import (
	"bytes"
	"net"
	"regexp"
	"sync"
	"testing"
	"time"
)

// network holds the gateway proxies of a supercluster and can cut a region
// off (a partition: its servers keep running) and heal it.
type network struct {
	mu       sync.Mutex
	isolated map[string]bool
	proxies  []*delayProxy
}

func (n *network) cut(region string) {
	n.mu.Lock()
	n.isolated[region] = true
	proxies := n.proxies
	n.mu.Unlock()
	for _, p := range proxies {
		p.drop(func(c *link) bool { return p.dst == region || c.from() == region })
	}
}

func (n *network) heal(region string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.isolated, region)
}

func (n *network) isCut(region string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.isolated[region]
}

// delayProxy forwards TCP connections to the gateway port of region dst,
// delivering every chunk delay after it was read: one-way latency on a
// gateway link. (netem is not available on the test machines, and on lo
// it would slow client links too.) It learns which region dials in from
// the gateway CONNECT, so a cut can drop both directions.
type delayProxy struct {
	net    *network
	ln     net.Listener
	dst    string
	target string
	delay  time.Duration

	mu    sync.Mutex
	links map[*link]bool
}

// link is one proxied connection.
type link struct {
	client, upstream net.Conn
	mu               sync.Mutex
	src              string // dialing region, from its CONNECT
}

func (l *link) from() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src
}

func (l *link) close() {
	l.client.Close()
	l.upstream.Close()
}

func (n *network) startProxy(t testing.TB, dst, target string, delay time.Duration) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &delayProxy{net: n, ln: ln, dst: dst, target: target, delay: delay, links: map[*link]bool{}}
	n.mu.Lock()
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.drop(func(*link) bool { return true })
	})
	return p
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.net.isCut(p.dst) {
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, upstream: u}
		p.mu.Lock()
		p.links[l] = true
		p.mu.Unlock()
		go p.pipe(l, c, u, true)
		go p.pipe(l, u, c, false)
	}
}

func (p *delayProxy) drop(match func(*link) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		if match(l) {
			l.close()
			delete(p.links, l)
		}
	}
}

var gatewayName = regexp.MustCompile(`"gateway":"([^"]+)"`)

func (p *delayProxy) pipe(l *link, src, dst net.Conn, sniff bool) {
	defer l.close()
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 4096)
	go func() {
		defer close(ch)
		var head []byte
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				if sniff && len(head) < 4096 {
					head = append(head, buf[:n]...)
					if m := gatewayName.FindSubmatch(head); m != nil && bytes.Contains(head, []byte("CONNECT")) {
						sniff = false
						l.mu.Lock()
						l.src = string(m[1])
						l.mu.Unlock()
						if p.net.isCut(l.src) {
							return
						}
					}
				}
				ch <- chunk{buf[:n], time.Now().Add(p.delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.at)) // the latency itself, not a wait for a condition
		if _, err := dst.Write(c.b); err != nil {
			for range ch {
			}
			return
		}
	}
}
