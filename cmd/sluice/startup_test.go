package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/embeddednats"
	"github.com/sluice-dev/sluice/internal/natstest"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestSetupWaitsForTheServer: at a fresh install the setup Job may start
// before the NATS server answers; with --startup-wait it retries until it
// does.
func TestSetupWaitsForTheServer(t *testing.T) {
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- execute(context.Background(), []string{"setup", "--nats", url, "--startup-wait", "60s"}, &bytes.Buffer{}, &errOut)
	}()
	select {
	case code := <-done:
		t.Fatalf("setup ended (exit %d) before the server started: %s", code, errOut.String())
	case <-time.After(3 * time.Second):
	}
	natstest.StartServer(t, embeddednats.Options{Port: port})
	if code := <-done; code != exitOK {
		t.Fatalf("setup: exit %d: %s", code, errOut.String())
	}
}

// TestServiceWaitsForSetup: a service that may not create the streams
// (--setup=false, as under per-service users) waits for `sluice setup`
// instead of failing, then starts and reports ready.
func TestServiceWaitsForSetup(t *testing.T) {
	url, _ := natstest.Start(t)
	httpAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- execute(ctx, []string{"quota", "--nats", url, "--setup=false", "--startup-wait", "60s", "--http-address", httpAddr},
			&bytes.Buffer{}, &errOut)
	}()
	defer func() {
		cancel()
		<-done
	}()
	select {
	case code := <-done:
		t.Fatalf("quota ended (exit %d) before setup: %s", code, errOut.String())
	case <-time.After(3 * time.Second):
	}
	if code, _, e := runSluice(t, "setup", "--nats", url); code != exitOK {
		t.Fatalf("setup: exit %d: %s", code, e)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota not ready 30s after setup: %v; its log:\n%s", err, errOut.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestStartupWaitNeverRetriesBadInput: a flag that is wrong stays wrong.
func TestStartupWaitNeverRetriesBadInput(t *testing.T) {
	code, _, errOut := runSluice(t, "setup", "--nats", "nats://127.0.0.1:1", "--replicas", "9", "--startup-wait", "10m")
	if code != exitBadInput {
		t.Fatalf("exit %d, want %d (bad input): %s", code, exitBadInput, errOut)
	}
}
