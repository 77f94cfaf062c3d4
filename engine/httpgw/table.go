package httpgw

import (
	"net/http"
	"sort"
	"strings"
)

// table is an immutable routing trie; the gateway swaps in a new one on
// every route change, so lookups take no lock.
type table struct {
	root *node
	n    int
}

type node struct {
	static map[string]*node
	param  *node
	wild   *node // terminal: a wildcard is always the last segment
	// routes by method ("*" for any) of the routes that end here.
	routes map[string]*compiled
}

func (n *node) child(s segment) *node {
	switch s.kind {
	case segParam:
		if n.param == nil {
			n.param = &node{}
		}
		return n.param
	case segWild:
		if n.wild == nil {
			n.wild = &node{}
		}
		return n.wild
	}
	if n.static == nil {
		n.static = map[string]*node{}
	}
	c := n.static[s.text]
	if c == nil {
		c = &node{}
		n.static[s.text] = c
	}
	return c
}

func buildTable(routes []*compiled) *table {
	t := &table{root: &node{}, n: len(routes)}
	for _, r := range routes {
		n := t.root
		for _, s := range r.segs {
			n = n.child(s)
		}
		if n.routes == nil {
			n.routes = map[string]*compiled{}
		}
		n.routes[r.Method] = r
	}
	return t
}

// match is the outcome of a lookup.
type match struct {
	route  *compiled
	params map[string]string
	// allow lists the methods of routes whose path matched when none
	// matched the method (a 405); empty when no path matched (a 404).
	allow []string
}

// lookup finds the most specific route for method and the decoded request
// segments. It backtracks, so a literal route that lacks the method does
// not hide a parameter route that has it.
func (t *table) lookup(method string, segs []string) match {
	var allow map[string]bool // allocated by pick only when a path matches without the method
	vals := make([]string, 0, 8)
	r, vals := t.root.lookup(segs, 0, method, vals, &allow)
	if r == nil {
		m := match{}
		for k := range allow {
			m.allow = append(m.allow, k)
		}
		sort.Strings(m.allow)
		return m
	}
	params := make(map[string]string, len(r.params))
	for i, name := range r.params {
		params[name] = vals[i]
	}
	return match{route: r, params: params}
}

func (n *node) lookup(segs []string, i int, method string, vals []string, allow *map[string]bool) (*compiled, []string) {
	if i == len(segs) {
		if r := pick(n.routes, method, allow); r != nil {
			return r, vals
		}
		if n.wild != nil {
			if r := pick(n.wild.routes, method, allow); r != nil {
				return r, append(vals, "")
			}
		}
		return nil, nil
	}
	seg := segs[i]
	if c := n.static[seg]; c != nil {
		if r, v := c.lookup(segs, i+1, method, vals, allow); r != nil {
			return r, v
		}
	}
	if n.param != nil && seg != "" {
		if r, v := n.param.lookup(segs, i+1, method, append(vals, seg), allow); r != nil {
			return r, v
		}
	}
	if n.wild != nil {
		if r := pick(n.wild.routes, method, allow); r != nil {
			return r, append(vals, strings.Join(segs[i:], "/"))
		}
	}
	return nil, nil
}

// pick chooses the route for method among routes whose path matched: the
// method itself, GET for HEAD, then any-method. Otherwise it records the
// methods that would have matched.
func pick(routes map[string]*compiled, method string, allow *map[string]bool) *compiled {
	if len(routes) == 0 {
		return nil
	}
	if r := routes[method]; r != nil {
		return r
	}
	if method == http.MethodHead {
		if r := routes[http.MethodGet]; r != nil {
			return r
		}
	}
	if r := routes[AnyMethod]; r != nil {
		return r
	}
	if *allow == nil {
		*allow = map[string]bool{}
	}
	for m := range routes {
		(*allow)[m] = true
		if m == http.MethodGet {
			(*allow)[http.MethodHead] = true
		}
	}
	return nil
}
