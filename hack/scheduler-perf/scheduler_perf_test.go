// Package schedulerperf runs kube-scheduler's own benchmark harness, scheduler_perf
// (k8s.io/kubernetes/test/integration/scheduler_perf), from the pinned Kubernetes release,
// with a test-case file of the project's own. hack/build-scheduler-perf.sh compiles it into
// ${ESCHER_CACHE_DIR}/bin/scheduler-perf.test; escher_harness.bench.scheduler_perf runs it.
//
// scheduler_perf starts its own etcd per workload (the `etcd` on PATH, on a unix socket,
// whatever KUBE_INTEGRATION_ETCD_URL says), an in-process kube-apiserver on a free
// loopback port, and an in-process kube-scheduler whose client has QPS = burst = 5000.
//
// With -escher-handover DIR the run hands its cluster to an outside process (the harness,
// which starts the ESCHER extender against it) and waits for it at three points:
//   - after the control plane is up: it writes DIR/cluster.kubeconfig (the apiserver's
//     loopback URL and token, verification skipped: see handOverCluster) and
//     DIR/cluster.json, then waits for DIR/cluster.ack;
//   - after each createNodes op: it writes DIR/nodes-<n>.json ({"nodes": [names]}) and
//     waits for DIR/nodes-<n>.ack, so an extender that learns nodes from a watch has seen
//     them all before the measured pods are created;
//   - once the workload is over, before the control plane stops: DIR/done.json, waiting for
//     DIR/done.ack (the outside process reads what it needs and stops).
package schedulerperf

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/pkg/scheduler"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"
	"k8s.io/kubernetes/test/utils/kubeconfig"
)

// Registered before perf.InitTests, which copies every flag defined so far.
var (
	configFile = flag.String("escher-config", "", "scheduler_perf test-case file to run (required)")
	topic      = flag.String("escher-topic", "escher", "topic name in the data-items file name")
	handover   = flag.String("escher-handover", "", "directory for the hand-over to an outside process (off when empty)")
	ackTimeout = flag.Duration("escher-handover-timeout", 3*time.Minute, "how long to wait for each acknowledgement")
)

func TestMain(m *testing.M) {
	if err := perf.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func BenchmarkPerfScheduling(b *testing.B) {
	if *configFile == "" {
		b.Fatal("-escher-config is required")
	}
	var options []perf.SchedulerPerfOption
	if *handover != "" {
		nodeOps := 0
		options = append(options,
			perf.WithPrepareFn(func(tCtx ktesting.TContext) error {
				return handOverCluster(*handover, tCtx)
			}),
			perf.WithNodeUpdateFn(func(_ ktesting.TContext, _ *scheduler.Scheduler, _ *perf.Workload, nodes *v1.NodeList) error {
				nodeOps++
				return handOverNodes(*handover, nodeOps, nodes)
			}),
		)
	}
	perf.RunBenchmarkPerfScheduling(b, *configFile, *topic, nil, options...)
}

func handOverCluster(dir string, tCtx ktesting.TContext) error {
	cfg := tCtx.RESTConfig()
	config := kubeconfig.CreateKubeConfig(cfg)
	// The in-process apiserver's loopback CA signs only the certificate it serves to the SNI
	// name apiserver-loopback-client (tls-server-name), which the extender's HTTP client does
	// not send; without it the apiserver serves a self-signed certificate made at start-up.
	// This apiserver listens on loopback only and lives for one workload, so the outside
	// process skips verification instead (its bearer token still authenticates it).
	for _, cluster := range config.Clusters {
		cluster.CertificateAuthorityData = nil
		cluster.TLSServerName = ""
		cluster.InsecureSkipTLSVerify = true
	}
	if err := clientcmd.WriteToFile(*config, filepath.Join(dir, "cluster.kubeconfig")); err != nil {
		return fmt.Errorf("write the kubeconfig: %w", err)
	}
	info := map[string]any{"server": cfg.Host, "qps": cfg.QPS, "burst": cfg.Burst}
	if err := post(dir, "cluster", info); err != nil {
		return err
	}
	// Cleanups run last-in first-out: this one before the apiserver's teardown, which would
	// otherwise wait a minute for the outside process's watches to end.
	tCtx.Cleanup(func() {
		if err := post(dir, "done", map[string]any{}); err != nil {
			tCtx.Errorf("hand-over: %v", err)
		}
	})
	return nil
}

func handOverNodes(dir string, n int, nodes *v1.NodeList) error {
	names := make([]string, 0, len(nodes.Items))
	for _, node := range nodes.Items {
		names = append(names, node.Name)
	}
	return post(dir, fmt.Sprintf("nodes-%d", n), map[string]any{"nodes": names})
}

// post writes DIR/<stage>.json atomically and waits for DIR/<stage>.ack.
func post(dir, stage string, content any) error {
	data, err := json.Marshal(content)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, stage+".json")
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return err
	}
	ack := filepath.Join(dir, stage+".ack")
	deadline := time.Now().Add(*ackTimeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(ack); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no %s within %s", ack, *ackTimeout)
}
