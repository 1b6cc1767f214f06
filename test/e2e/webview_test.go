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
	// A cohort with a ClusterQueue of 2 GPUs, for the cohort tree.
	cohortQueue(t, ns+"-team", ns+"-org", 2)
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

	// The last hour: the admissions drawn as bars.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#chart-minutes svg rect[data-series="admitted"]`))); err != nil {
		t.Errorf("no admitted bar in the last hour's chart: %v", err)
	}
	screenshot(t, ctx, "webview.png")

	// The cohort tree: the cohort with its subtree's quota, the
	// ClusterQueue with its usage.
	visit := func(hash string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate("http://"+env.httpAddr+"/"+hash)); err != nil {
			t.Fatalf("open %s: %v", hash, err)
		}
	}
	visit("#/cohorts")
	cohortRow := text(fmt.Sprintf(`#cohort-tree li[data-cohort=%q] > .res[data-resource="nvidia.com/gpu"] .num`, ns+"-org"))
	cqBar, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(fmt.Sprintf(`#cohort-tree li[data-cluster-queue=%q] .res[data-resource="nvidia.com/gpu"] .fill`, ns)), "style"))
	if err != nil {
		t.Fatalf("tree bar: %v", err)
	}
	if strings.TrimSpace(cohortRow) != "0 / 2" || !strings.Contains(cqBar.Value, "width: 100%") {
		t.Errorf("cohort row %q (want 0 / 2), ClusterQueue bar %q (want full)", cohortRow, cqBar.Value)
	}
	screenshot(t, ctx, "webview-cohorts.png")

	// The LocalQueues.
	visit("#/localqueues")
	lqRow := fmt.Sprintf(`#lq-table tr[data-local-queue=%q]`, ns+"/q")
	if got := text(lqRow + " td.cluster-queue"); got != ns {
		t.Errorf("LocalQueue row's ClusterQueue %q; want %q", got, ns)
	}
	if got := text(lqRow + " td.usage"); !strings.Contains(got, "a100 nvidia.com/gpu") {
		t.Errorf("LocalQueue usage %q", got)
	}
	screenshot(t, ctx, "webview-localqueues.png")

	// The waiting Job's page: its state, its reasons over time, its trace
	// as a waterfall, its events.
	visit("#/workload/" + ns + "/job.waiting")
	state := text(`#wl-summary dd[data-field="State"]`)
	reasonOverTime := text(`#wl-reasons tr.reason-row td.reason`)
	queuedSpan := text(`#wl-waterfall .span[data-span="queued"] .label`)
	submittedEvent := text(`#wl-events li[data-type="submitted"] .detail`)
	if (state != "Pending" && state != "Admitted" && state != "Running" && state != "Finished") || !strings.Contains(reasonOverTime, "insufficient unused quota") ||
		queuedSpan != "queued" || !strings.Contains(submittedEvent, "submitted to LocalQueue q") {
		t.Errorf("workload page: state %q, reason %q, span %q, event %q", state, reasonOverTime, queuedSpan, submittedEvent)
	}
	screenshot(t, ctx, "webview-workload.png")
	waitComplete(t, ns, "late", 90*time.Second)
}

// screenshot saves the page as bin/e2e-output/NAME.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join(root(), "bin", "e2e-output")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
