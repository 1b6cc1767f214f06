package e2e

import (
	"io"
	"net"
	"sync"
	"testing"
)

// A worker cluster's NATS joins the suite's through a leafProxy of its
// own, so a test can cut that worker off the manager, and only that. A
// leaf node adds the address the server advertises to the one it was
// given and reconnects to either, so the suite's NATS advertises a
// refuser's, which takes no connection: a worker gets back in only
// through its proxy.

// leafProxy carries one worker's leaf connections to the suite's leaf
// port: cutOff closes them and refuses new ones until restore.
type leafProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func startLeafProxy(t *testing.T, target string) *leafProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &leafProxy{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close(); p.closeAll() })
	go p.serve()
	return p
}

func (p *leafProxy) addr() string { return p.ln.Addr().String() }

func (p *leafProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
	}
}

// cutOff drops the worker's leaf connection and refuses it back.
func (p *leafProxy) cutOff() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
	p.closeAll()
}

// restore lets the worker's leaf connection back in.
func (p *leafProxy) restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *leafProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// startRefuser listens on loopback and closes every connection at once:
// the leaf address the suite's NATS advertises.
func startRefuser() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return ln.Addr().String(), func() { _ = ln.Close() }, nil
}
