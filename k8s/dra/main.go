// rtslice-dra: the kubelet plugin of rtslice's DRA driver (docs/dra.md). Thin, like k8s/nri: every
// decision is the rtslice node service's, over its unix socket.
//   - Publishes this node's ResourceSlice: the devices the node service computes (one per
//     reservable CPU, with its free real-time bandwidth as consumable capacity), re-read every
//     --resync and republished when they change.
//   - NodePrepareResources: hands each allocated claim to the node service, which admits it with
//     its live planner (its refusal, with the planner's reason, fails the preparation), then writes
//     the claim's CDI spec: one environment entry that tells the node service, when the NRI plugin
//     reports the container's creation, which container holds the claim.
//   - NodeUnprepareResources: releases the claim there and removes its CDI spec.
//
// It keeps no state of its own (the node service keeps the claims), so it can restart at any time.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

const driverName = "rtslice.io"

type driver struct {
	client *http.Client
	node   string
	cdiDir string
	helper *kubeletplugin.Helper
}

// call sends one request to the node service and decodes its JSON answer into out; a non-2xx
// answer becomes an error carrying the node service's message.
func (d *driver) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://rtslice"+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return fmt.Errorf("rtslice node service unreachable (is `rtslice daemon` running?): %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error  string   `json:"error"`
			Errors []string `json:"errors"`
		}
		msg := string(raw)
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			msg = e.Error
			for _, x := range e.Errors {
				msg += "\n" + x
			}
		}
		return fmt.Errorf("rtslice (%d): %s", resp.StatusCode, msg)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// publish reads the node service's devices and publishes them when they changed.
func (d *driver) publish(ctx context.Context, last *[]resourceapi.Device) error {
	var got struct {
		Devices []resourceapi.Device `json:"devices"`
	}
	if err := d.call(ctx, http.MethodGet, "/v1/dra/devices", nil, &got); err != nil {
		return err
	}
	if got.Devices == nil {
		got.Devices = []resourceapi.Device{}
	}
	if *last != nil && reflect.DeepEqual(*last, got.Devices) {
		return nil
	}
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.node: {Slices: []resourceslice.Slice{{Devices: got.Devices}}},
	}}
	if err := d.helper.PublishResources(ctx, res); err != nil {
		return err
	}
	*last = got.Devices
	fmt.Fprintf(os.Stderr, "rtslice-dra: published %d devices\n", len(got.Devices))
	return nil
}

type cdiSpec struct {
	CdiVersion string      `json:"cdiVersion"`
	Kind       string      `json:"kind"`
	Devices    []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name           string `json:"name"`
	ContainerEdits struct {
		Env []string `json:"env"`
	} `json:"containerEdits"`
}

func (d *driver) cdiFile(uid types.UID) string {
	return filepath.Join(d.cdiDir, "rtslice.io-claim_"+string(uid)+".json")
}

func (d *driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	var ans struct {
		Env []string `json:"env"`
	}
	if err := d.call(ctx, http.MethodPost, "/v1/dra/claims", map[string]any{"pool": d.node, "claim": claim}, &ans); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	spec := cdiSpec{CdiVersion: "0.6.0", Kind: "rtslice.io/claim", Devices: []cdiDevice{{Name: string(claim.UID)}}}
	spec.Devices[0].ContainerEdits.Env = ans.Env
	b, _ := json.Marshal(spec)
	// Written whole then renamed: the runtime never reads half a spec.
	tmp := d.cdiFile(claim.UID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("writing the claim's CDI spec: %w", err)}
	}
	if err := os.Rename(tmp, d.cdiFile(claim.UID)); err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("writing the claim's CDI spec: %w", err)}
	}
	id := "rtslice.io/claim=" + string(claim.UID)
	var devs []kubeletplugin.Device
	if claim.Status.Allocation != nil {
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver == driverName {
				devs = append(devs, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: []string{id}})
			}
		}
	}
	return kubeletplugin.PrepareResult{Devices: devs}
}

func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		out[c.UID] = d.prepare(ctx, c)
	}
	return out, nil
}

func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := d.call(ctx, http.MethodDelete, "/v1/dra/claims/"+string(c.UID), nil, nil)
		if err == nil {
			if rm := os.Remove(d.cdiFile(c.UID)); rm != nil && !errors.Is(rm, os.ErrNotExist) {
				err = rm
			}
		}
		out[c.UID] = err
	}
	return out, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	fmt.Fprintf(os.Stderr, "rtslice-dra: %s: %v\n", msg, err)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		os.Exit(1)
	}
}

func main() {
	socket := flag.String("socket", "/run/rtslice/api.sock", "the rtslice node service's unix socket")
	node := flag.String("node-name", os.Getenv("NODE_NAME"), "this node's name in Kubernetes (the ResourceSlice's pool)")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig (default: in-cluster)")
	kubeletDir := flag.String("kubelet-dir", "/var/lib/kubelet", "kubelet's root directory (its plugins_registry and plugins directories)")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "where the container runtime reads CDI specs")
	resync := flag.Duration("resync", 10*time.Second, "how often the devices are re-read from the node service")
	flag.Parse()
	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "rtslice-dra: "+format+"\n", a...)
		os.Exit(2)
	}
	if *node == "" {
		fail("no node name: give --node-name or NODE_NAME")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("Kubernetes client: %v", err)
	}
	pluginDir := filepath.Join(*kubeletDir, "plugins", driverName)
	for _, dir := range []string{pluginDir, filepath.Join(*kubeletDir, "plugins_registry"), *cdiDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fail("%v", err)
		}
	}
	d := &driver{node: *node, cdiDir: *cdiDir, client: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", *socket)
		}},
	}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	d.helper, err = kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(driverName),
		kubeletplugin.NodeName(*node),
		kubeletplugin.KubeClient(kube),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(*kubeletDir, "plugins_registry")),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
	)
	if err != nil {
		fail("starting the kubelet plugin: %v", err)
	}
	var last []resourceapi.Device
	tick := time.NewTicker(*resync)
	defer tick.Stop()
	for {
		if err := d.publish(ctx, &last); err != nil {
			fmt.Fprintf(os.Stderr, "rtslice-dra: devices: %v\n", err)
		}
		select {
		case <-ctx.Done():
			// The slices stay: the devices are still there, and a restarted plugin takes them over.
			d.helper.Stop()
			return
		case <-tick.C:
		}
	}
}
