package baseline

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// NATSRequests counts what Sluice's services asked of NATS during a run,
// by kind (natsRequestKind): reads of streams and buckets by direct get,
// bucket writes, consumer pulls and acknowledgements, other JetStream API
// calls. With the API server, NATS is the other shared part every Job
// costs something, and a direct get costs the server more than a publish.
type NATSRequests struct {
	// ByKind is the count per kind.
	ByKind map[string]int
	// Total is the sum of ByKind.
	Total int
}

// natsCountSubjects are the subjects a natsCounter listens on: a client
// in the services' account receives a copy of each request sent there.
var natsCountSubjects = []string{"$JS.API.>", "$JS.ACK.>", "$KV.>"}

// natsRequestKind names the kind of request a message on subject is, or
// says it is none counted. A direct get names a subject (the last message
// on it: a bucket's get) or carries a request (Sluice's pages and watches
// ask for the next messages from a sequence):
//
//	$JS.API.DIRECT.GET.<stream>.<subject>  "direct get <stream> last"
//	$JS.API.DIRECT.GET.<stream>            "direct get <stream> next"
//	$JS.API.CONSUMER.MSG.NEXT.<s>.<d>      "pull <d>"
//	$JS.ACK.[<domain>.<hash>.]<s>.<d>.…    "ack <d>"
//	$KV.<bucket>.<key>                     "write <bucket>"
//	$JS.API.<A>.<B>…                       "API <A>.<B>"
func natsRequestKind(subject string) (string, bool) {
	tok := strings.Split(subject, ".")
	switch {
	case len(tok) >= 5 && tok[0] == "$JS" && tok[1] == "API" && tok[2] == "DIRECT" && tok[3] == "GET":
		if len(tok) == 5 {
			return "direct get " + tok[4] + " next", true
		}
		return "direct get " + tok[4] + " last", true
	case len(tok) >= 7 && tok[0] == "$JS" && tok[1] == "API" && tok[2] == "CONSUMER" && tok[3] == "MSG" && tok[4] == "NEXT":
		return "pull " + tok[6], true
	case len(tok) >= 4 && tok[0] == "$JS" && tok[1] == "API":
		return "API " + tok[2] + "." + tok[3], true
	case len(tok) == 9 && tok[0] == "$JS" && tok[1] == "ACK":
		// $JS.ACK.<stream>.<durable>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
		return "ack " + tok[3], true
	case len(tok) >= 11 && tok[0] == "$JS" && tok[1] == "ACK":
		// The same after a domain and an account hash (and, in newer
		// servers, a random token at the end).
		return "ack " + tok[5], true
	case len(tok) >= 3 && tok[0] == "$KV":
		return "write " + tok[1], true
	}
	return "", false
}

// natsCounter counts requests from its start to its stop.
type natsCounter struct {
	nc     *nats.Conn
	closed chan struct{}
	mu     sync.Mutex
	counts map[string]int
}

// countNATS starts counting the requests sent to the NATS server at url.
func countNATS(url string) (*natsCounter, error) {
	closed := make(chan struct{})
	nc, err := nats.Connect(url, nats.Name("sluice-loadtest-requests"), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		return nil, fmt.Errorf("count NATS requests: %w", err)
	}
	c := &natsCounter{nc: nc, closed: closed, counts: map[string]int{}}
	for _, s := range natsCountSubjects {
		sub, err := nc.Subscribe(s, func(m *nats.Msg) {
			if k, ok := natsRequestKind(m.Subject); ok {
				c.mu.Lock()
				c.counts[k]++
				c.mu.Unlock()
			}
		})
		if err == nil {
			// Copies wait in the client however many come at once.
			err = sub.SetPendingLimits(-1, -1)
		}
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("count NATS requests on %s: %w", s, err)
		}
	}
	// The server must have the subscriptions before the first request
	// counts.
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("count NATS requests: %w", err)
	}
	return c, nil
}

// drainWait bounds how long stop waits for the copies already sent.
const drainWait = 10 * time.Second

// stop ends the count once every copy sent so far is in (or drainWait
// passed), and returns it.
func (c *natsCounter) stop() NATSRequests {
	if c.nc.Drain() == nil {
		select {
		case <-c.closed:
		case <-time.After(drainWait):
		}
	}
	c.nc.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	r := NATSRequests{ByKind: maps.Clone(c.counts)}
	for _, n := range r.ByKind {
		r.Total += n
	}
	return r
}

// summary is the requests per Job, the most frequent kinds first, the
// rest (under 0.05 per Job) summed up.
func (r NATSRequests) summary(jobs int) string {
	if jobs == 0 || r.Total == 0 {
		return "none counted"
	}
	kinds := largestFirst(r.ByKind)
	var b strings.Builder
	fmt.Fprintf(&b, "%d, %.2f per Job:", r.Total, float64(r.Total)/float64(jobs))
	rest := 0
	for _, k := range kinds {
		per := float64(r.ByKind[k]) / float64(jobs)
		if per < 0.05 {
			rest += r.ByKind[k]
			continue
		}
		fmt.Fprintf(&b, " %s %.2f;", k, per)
	}
	if rest > 0 {
		fmt.Fprintf(&b, " other %.2f", float64(rest)/float64(jobs))
	}
	return strings.TrimSuffix(b.String(), ";")
}
