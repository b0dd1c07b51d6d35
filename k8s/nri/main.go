// rtslice-nri: a thin NRI plugin (containerd >= 1.7, CRI-O) that hands container events to the
// rtslice node service on its unix socket (docs/kubernetes.md, "Node side"). Every decision is the
// node service's: admission by its live planner at creation (the cpuset adjustment, or the
// planner's reason as the creation error), in-place application at start, release at stop/removal.
// The plugin keeps no state of its own, so it can restart at any time.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct {
	client *http.Client
}

// reply is the node service's answer: the planner's placement, or an error with located messages.
type reply struct {
	Workload string   `json:"workload"`
	Cpus     string   `json:"cpus"`
	Mems     string   `json:"mems"`
	Error    string   `json:"error"`
	Errors   []string `json:"errors"`
}

func (p *plugin) call(ctx context.Context, method, path string, body any) (int, *reply, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://rtslice"+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("rtslice node service unreachable (is `rtslice daemon` running?): %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := &reply{}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, r); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("rtslice node service answered %d with %q", resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, r, nil
}

func failure(code int, r *reply) error {
	msg := r.Error
	for _, e := range r.Errors {
		msg += "\n" + e
	}
	return fmt.Errorf("rtslice (%d): %s", code, msg)
}

type createBody struct {
	ID          string            `json:"id"`
	Namespace   string            `json:"namespace"`
	Pod         string            `json:"pod"`
	PodUID      string            `json:"podUid"`
	Container   string            `json:"container"`
	Annotations map[string]string `json:"annotations"`
	// The environment entries naming rtslice DRA claims (put there by the claims' CDI devices,
	// k8s/dra): how the node service knows which container holds which claim. No other
	// variable leaves the runtime.
	Env []string `json:"env"`
}

func claimEnv(env []string) []string {
	out := []string{}
	for _, e := range env {
		if strings.HasPrefix(e, "RTSLICE_CLAIM_") {
			out = append(out, e)
		}
	}
	return out
}

func (p *plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	code, r, err := p.call(ctx, http.MethodPost, "/v1/containers", createBody{
		ID: ctr.GetId(), Namespace: pod.GetNamespace(), Pod: pod.GetName(), PodUID: pod.GetUid(),
		Container: ctr.GetName(), Annotations: pod.GetAnnotations(), Env: claimEnv(ctr.GetEnv()),
	})
	if err != nil {
		return nil, nil, err
	}
	switch {
	case code == http.StatusNoContent:
		return nil, nil, nil // not rtslice's business
	case code/100 == 2:
		adj := &api.ContainerAdjustment{}
		adj.SetLinuxCPUSetCPUs(r.Cpus)
		if r.Mems != "" {
			adj.SetLinuxCPUSetMems(r.Mems)
		}
		return adj, nil, nil
	default:
		return nil, nil, failure(code, r)
	}
}

// Synchronize is the runtime's first call once the plugin is registered: from then on it sends
// this plugin every container event. Containers that exist already were admitted (or not) before a
// restart and the node service keeps its own record of them, so nothing is updated; the line on
// stderr is how a supervisor (and crates/cli/tests/cri_pod.rs) knows the plugin is in the path.
func (p *plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	fmt.Fprintf(os.Stderr, "rtslice-nri: synchronized with the runtime (%d pods, %d containers)\n", len(pods), len(ctrs))
	return nil, nil
}

func (p *plugin) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	code, r, err := p.call(ctx, http.MethodPost, "/v1/containers/"+ctr.GetId()+"/start", map[string]any{"pid": ctr.GetPid()})
	if err != nil {
		return err
	}
	if code == http.StatusNotFound || code/100 == 2 {
		return nil
	}
	return failure(code, r)
}

func (p *plugin) release(ctx context.Context, ctr *api.Container) error {
	code, r, err := p.call(ctx, http.MethodDelete, "/v1/containers/"+ctr.GetId(), nil)
	if err != nil {
		return err
	}
	if code == http.StatusNotFound || code/100 == 2 {
		return nil
	}
	return failure(code, r)
}

func (p *plugin) StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, p.release(ctx, ctr)
}

func (p *plugin) RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return p.release(ctx, ctr)
}

func main() {
	socket := flag.String("socket", "/run/rtslice/api.sock", "the rtslice node service's unix socket")
	name := flag.String("name", "rtslice", "plugin name registered with the runtime")
	idx := flag.String("idx", "10", "plugin index (order among NRI plugins)")
	nriSocket := flag.String("nri-socket", "", "the runtime's NRI socket (default: NRI's default)")
	flag.Parse()
	p := &plugin{client: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", *socket)
		}},
	}}
	opts := []stub.Option{stub.WithPluginName(*name), stub.WithPluginIdx(*idx), stub.WithOnClose(func() { os.Exit(1) })}
	if *nriSocket != "" {
		opts = append(opts, stub.WithSocketPath(*nriSocket))
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rtslice-nri: %v\n", err)
		os.Exit(2)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "rtslice-nri: %v\n", err)
		os.Exit(1)
	}
}
