package daemon

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/zfs-csi/zfs-csi/metrics"
	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/wiring"
	"github.com/zfs-csi/zfs-csi/wiring/wiringtest"
)

// long: one cycle of calls, then the scrape that must show each of them
func TestAScrapeAfterACreateSnapshotDeleteCycleShowsCallsAndVolumes(t *testing.T) {
	f := wiringtest.New(t)
	m := metrics.New(metrics.Config{DriverName: "zfs.csi.dev", Version: "test", WithoutProcessMetrics: true,
		Read: func(ctx context.Context) (metrics.State, error) { return wiring.MetricsState(ctx, f.Fake, f.Config) }})
	server := rpc.NewServer(zerolog.Nop(), rpc.Services{Controller: f.Controller}, m.UnaryInterceptor())
	endpoint := "unix://" + filepath.Join(t.TempDir(), "csi.sock")
	if err := server.Listen(endpoint); err != nil {
		t.Fatal(err)
	}
	go server.Serve()
	defer server.Stop(context.Background())
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := csi.NewControllerClient(conn)

	create := func(name string) string {
		response, err := client.CreateVolume(t.Context(), &csi.CreateVolumeRequest{Name: name,
			CapacityRange:      &csi.CapacityRange{RequiredBytes: 1 << 30},
			VolumeCapabilities: []*csi.VolumeCapability{wiringtest.Mount("")},
			Parameters:         map[string]string{"csi.storage.k8s.io/pvc/namespace": "shop", "csi.storage.k8s.io/pvc/name": name}})
		if err != nil {
			t.Fatal(err)
		}
		return response.GetVolume().GetVolumeId()
	}
	kept, held := create("kept"), create("held")
	if err := f.Fake.Write(wiringtest.Dataset(kept), 3<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CreateSnapshot(t.Context(), &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: held}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: held}); err != nil {
		t.Fatal(err)
	}
	client.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{}) // INVALID_ARGUMENT
	// Another node's volume, as Nomad sends it to any node: refused by design,
	// counted apart from the calls served.
	client.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: "other-node:tank/csi/pvc-x"})

	web := httptest.NewServer(m.Handler())
	defer web.Close()
	// The parent's available space is the pool's 100 GiB less the two thick
	// volumes' 1 GiB reservations (the held one still reserves), whatever
	// little they hold: what a CreateVolume can still get.
	expected := `
# HELP zfs_csi_reaper_backlog_volumes Volumes deleted by the CO but still held by their snapshots or clones.
# TYPE zfs_csi_reaper_backlog_volumes gauge
zfs_csi_reaper_backlog_volumes 1
# HELP zfs_csi_volume_capacity_bytes Volume size: refquota of a dataset, volsize of a zvol.
# TYPE zfs_csi_volume_capacity_bytes gauge
zfs_csi_volume_capacity_bytes{volume_id="` + kept + `"} 1.073741824e+09
# HELP zfs_csi_volume_info Always 1 for each live volume; labelled with what names it.
# TYPE zfs_csi_volume_info gauge
zfs_csi_volume_info{csi_name="kept",kind="dataset",pvc_name="kept",pvc_namespace="shop",volume_id="` + kept + `"} 1
# HELP zfs_csi_volume_referenced_bytes Space the volume's current data takes (referenced).
# TYPE zfs_csi_volume_referenced_bytes gauge
zfs_csi_volume_referenced_bytes{volume_id="` + kept + `"} 3.145728e+06
# HELP zfs_csi_pool_size_bytes Pool size.
# TYPE zfs_csi_pool_size_bytes gauge
zfs_csi_pool_size_bytes{pool="tank"} 1.073741824e+11
# HELP zfs_csi_parent_available_bytes Space new volumes under the parent dataset can still take (zfs list -o available): thick volumes' reservations and the parent's quota are already out of it, unlike the pool's free space.
# TYPE zfs_csi_parent_available_bytes gauge
zfs_csi_parent_available_bytes{parent="tank/csi",pool="tank"} 1.05226698752e+11
`
	if err := testutil.ScrapeAndCompare(web.URL+"/metrics", strings.NewReader(expected), "zfs_csi_reaper_backlog_volumes",
		"zfs_csi_volume_capacity_bytes", "zfs_csi_volume_info", "zfs_csi_volume_referenced_bytes", "zfs_csi_pool_size_bytes",
		"zfs_csi_parent_available_bytes"); err != nil {
		t.Error(err)
	}
	families := scrapeText(t, web.URL)
	for _, want := range []string{
		`zfs_csi_rpc_duration_seconds_count{code="OK",method="CreateVolume"} 2`,
		`zfs_csi_rpc_duration_seconds_count{code="OK",method="CreateSnapshot"} 1`,
		`zfs_csi_rpc_duration_seconds_count{code="OK",method="DeleteVolume"} 1`,
		`zfs_csi_rpc_duration_seconds_count{code="InvalidArgument",method="DeleteVolume"} 1`,
		`zfs_csi_rpc_other_node_refusals_total{code="FailedPrecondition",method="DeleteVolume"} 1`,
	} {
		if !strings.Contains(families, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
	if strings.Contains(families, `zfs_csi_rpc_duration_seconds_count{code="FailedPrecondition"`) {
		t.Error("another node's volume counts as a failed call")
	}
}

func scrapeText(t *testing.T, url string) string {
	t.Helper()
	response, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
