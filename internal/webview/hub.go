package webview

import (
	"context"
	"errors"
	"sync"
)

// DefaultMaxClients bounds the live feed's clients at once.
const DefaultMaxClients = 64

// ErrTooManyClients: the live feed has as many clients as it takes.
var ErrTooManyClients = errors.New("the live feed has as many clients as it takes; try again later")

// hub shares one Follow of the feed among every client of the live feed:
// a client costs a buffered channel, not a subscription of its own. The
// Follow starts with the first client and ends with the last.
type hub struct {
	feed Feed
	max  int

	mu      sync.Mutex
	clients map[*client]struct{}
	// run is the current Follow, nil when no client is connected.
	run *hubRun
}

// hubRun is one Follow of the feed.
type hubRun struct {
	cancel context.CancelFunc
	// ready closes once the Follow delivers everything published from
	// then on; done closes when it returns, err set.
	ready, done chan struct{}
	err         error
}

// client is one client's share of the feed.
type client struct {
	ch  chan Event
	run *hubRun
}

func newHub(feed Feed, max int) *hub {
	return &hub{feed: feed, max: max, clients: map[*client]struct{}{}}
}

// join adds a client, starting the Follow for the first.
func (h *hub) join() (*client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.clients) >= h.max {
		return nil, ErrTooManyClients
	}
	if h.run == nil {
		ctx, cancel := context.WithCancel(context.Background())
		run := &hubRun{cancel: cancel, ready: make(chan struct{}), done: make(chan struct{})}
		h.run = run
		go func() {
			var once sync.Once
			run.err = h.feed.Follow(ctx, func() { once.Do(func() { close(run.ready) }) }, h.deliver)
			h.mu.Lock()
			if h.run == run {
				h.run = nil // the next client follows anew
			}
			h.mu.Unlock()
			close(run.done)
		}()
	}
	c := &client{ch: make(chan Event, 256), run: h.run}
	h.clients[c] = struct{}{}
	return c, nil
}

// leave removes a client, ending the Follow with the last.
func (h *hub) leave(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.clients, c)
	if len(h.clients) == 0 && h.run != nil {
		h.run.cancel()
		h.run = nil
	}
}

// deliver hands an event to every client; one too slow to keep up loses
// it rather than holding the others.
func (h *hub) deliver(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		select {
		case c.ch <- e:
		default:
		}
	}
}
