package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser finds the headless browser: $SLUICE_BROWSER, or chromium on the
// PATH. CI installs it (.ci/run) and sets SLUICE_BROWSER_REQUIRED, so the
// test never skips there.
func browser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_BROWSER"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_BROWSER_REQUIRED") != "" {
		t.Fatal("no chromium found (apt-get install chromium, or set SLUICE_BROWSER)")
	}
	t.Skip("no chromium found: install Debian's chromium package to run the web view test")
	return ""
}

// The web view in a real headless browser: the queue is drawn, a waiting
// Job shows its position and reason, and an event that happens after the
// page loaded appears in the live feed.
func TestWebView(t *testing.T) {
	exe := browser(t)
	ns := "e2e-web"
	queues(t, ns, 4, "Never")
	createJob(t, jobSpec{ns: ns, name: "running", queue: "q", pods: 4, gpus: 1, runFor: "25s"})
	waitRunning(t, ns, "running", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "waiting", queue: "q", pods: 2, gpus: 1, runFor: "1s"})
	waitEvent(t, ns, "waiting", "Pending", "insufficient unused quota", 20*time.Second)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("headless", true), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first action starts the browser, which lives as long as that
	// action's context: no timeout on it.
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+env.httpAddr+"/")); err != nil {
		t.Fatalf("load the web view: %v", err)
	}
	ctx, cancelTimeout := context.WithTimeout(bctx, 90*time.Second)
	defer cancelTimeout()
	text := func(sel string) string {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
			t.Fatalf("wait for %s: %v", sel, err)
		}
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}

	row := fmt.Sprintf(`#pending-table tr[data-workload=%q]`, ns+"/waiting")
	queueName := text(fmt.Sprintf(`.queue[data-name=%q] .name`, ns))
	position, reason := text(row+" td.position"), text(row+" td.reason")
	if queueName != ns || strings.TrimSpace(position) != "0" || !strings.Contains(reason, "insufficient unused quota") {
		t.Errorf("queue %q, waiting job's position %q and reason %q; want %q, 0, insufficient unused quota", queueName, position, reason, ns)
	}
	bar, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(fmt.Sprintf(`.queue[data-name=%q] .res[data-resource="nvidia.com/gpu"] .fill`, ns)), "style"))
	if err != nil {
		t.Fatalf("usage bar: %v", err)
	}
	if !strings.Contains(bar.Value, "width: 100%") {
		t.Errorf("gpu usage bar style %q, want full (4 of 4 in use)", bar.Value)
	}

	// An event after the page loaded: a new Job's submission.
	createJob(t, jobSpec{ns: ns, name: "late", queue: "q", pods: 1, gpus: 1, runFor: "1s"})
	line := text(fmt.Sprintf(`#feed-list li[data-type="submitted"][data-workload=%q]`, ns+"/late"))
	if !strings.Contains(line, "submitted") || !strings.Contains(line, ns+"/late") {
		t.Errorf("feed line %q", line)
	}

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join(root(), "bin", "e2e-output")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "webview.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	waitComplete(t, ns, "late", 90*time.Second)
}
