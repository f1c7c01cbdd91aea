package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
)

// TestPoolPropertiesAreTheOperatorsToAllow runs one table through the three
// ways a request sets a property: CreateVolume's parameters, its
// mutable_parameters, and ControllerModifyVolume's.
func TestPoolPropertiesAreTheOperatorsToAllow(t *testing.T) {
	tests := []struct {
		name            string
		allowed         []string
		property, value string
		zvol            bool
		refused         bool
	}{
		{"dedup is refused unless the operator allows it", nil, "dedup", "on", false, true},
		{"dedup with another checksum is refused too", nil, "dedup", "sha256,verify", true, true},
		{"more than one copy is refused", nil, "copies", "2", true, true},
		{"special_small_blocks is refused", nil, "special_small_blocks", "64K", false, true},
		{"dedup=off spends nothing and is always accepted", nil, "dedup", "off", true, false},
		{"copies=1 spends nothing and is always accepted", nil, "copies", "1", false, false},
		{"special_small_blocks=0 spends nothing and is always accepted", nil, "special_small_blocks", "0", false, false},
		{"a property the operator allows is accepted", []string{"dedup", "copies"}, "copies", "3", true, false},
		{"allowing one property allows no other", []string{"dedup"}, "special_small_blocks", "16K", false, true},
		{"redundant_metadata spends only the volume's share and needs no allowance", nil, "redundant_metadata", "most", false, false},
		{"primarycache can only cache less and needs no allowance", nil, "primarycache", "metadata", true, false},
		{"sync=always needs no allowance", nil, "sync", "always", false, false},
	}
	for _, test := range tests {
		cfg := rules.Config{DriverName: "zfs.csi.dev", NodeID: testNode, ParentDatasets: []string{"tank/csi"}, AllowedPoolProperties: test.allowed}
		props := rules.NewUserProps(cfg.DriverName)
		request := map[string]string{PropertyPrefix + test.property: test.value}
		ways := map[string]func() (map[string]string, error){
			"parameters": func() (map[string]string, error) {
				p, err := parseCreateParams(cfg, props, request, nil, test.zvol)
				return p.properties, err
			},
			"mutable_parameters at creation": func() (map[string]string, error) {
				p, err := parseCreateParams(cfg, props, nil, request, test.zvol)
				return p.properties, err
			},
			"ControllerModifyVolume": func() (map[string]string, error) {
				return parseMutable(newPropertyPolicy(cfg, props, test.zvol), request)
			},
		}
		for way, parse := range ways {
			t.Run(test.name+", in "+way, func(t *testing.T) {
				properties, err := parse()
				switch {
				case test.refused && status.Code(err) != codes.InvalidArgument:
					t.Fatalf("got %v, want INVALID_ARGUMENT", err)
				case test.refused && !strings.Contains(err.Error(), "--"+AllowPoolPropertiesFlag+"="+test.property) ||
					test.refused && !strings.Contains(err.Error(), AllowPoolPropertiesEnv):
					t.Errorf("the refusal does not name the option that allows it: %v", err)
				case !test.refused && err != nil:
					t.Fatalf("got %v, want the property accepted", err)
				case !test.refused && properties[test.property] != test.value:
					t.Errorf("properties = %v, want %s=%s", properties, test.property, test.value)
				}
			})
		}
	}
}

func TestAnAllowanceNamesOnlyPoolProperties(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		wantErr bool
	}{
		{"no allowance", nil, false},
		{"every pool property", PoolPropertyNames(), false},
		{"a typo would allow nothing and is refused", []string{"dedupe"}, true},
		{"a property that needs no allowance is refused", []string{"compression"}, true},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			err := CheckAllowedPoolProperties(test.allowed)
			if (err != nil) != test.wantErr {
				t.Fatalf("CheckAllowedPoolProperties(%v) = %v, want an error: %t", test.allowed, err, test.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "--"+AllowPoolPropertiesFlag) {
				t.Errorf("the error does not name the option: %v", err)
			}
			cfg := rules.Config{DriverName: "zfs.csi.dev", NodeID: testNode, ParentDatasets: []string{"tank/csi"}, AllowedPoolProperties: test.allowed}
			if _, err := New(cfg, nil, zerolog.Nop()); (err != nil) != test.wantErr {
				t.Errorf("New = %v, want an error: %t", err, test.wantErr)
			}
		})
	}
}

// TestPoolPropertiesReachZFSOnlyWhenAllowed runs the rule through the
// service: nothing runs for a refused request, the property is set for an
// allowed one.
func TestPoolPropertiesReachZFSOnlyWhenAllowed(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		h := newHarness(t)
		if allowed {
			h.server.cfg.AllowedPoolProperties = []string{"dedup", "copies"}
		}
		req := createRequest("v", 1<<30, mountCapability(""))
		req.Parameters = map[string]string{"zfs.dedup": "on"}
		_, err := h.server.CreateVolume(context.Background(), req)
		if allowed != (err == nil) || !allowed && code(err) != codes.InvalidArgument {
			t.Fatalf("allowed %t: CreateVolume with dedup=on: %v", allowed, err)
		}
		if !allowed && h.fake.TotalCalls() != 0 {
			t.Errorf("refused CreateVolume ran %v", h.fake.Calls())
		}
		volume := h.create(createRequest("w", 1<<30, mountCapability("")))
		h.fake.ResetCalls()
		_, err = h.server.ControllerModifyVolume(context.Background(), &csi.ControllerModifyVolumeRequest{
			VolumeId: volume.GetVolumeId(), MutableParameters: map[string]string{"zfs.copies": "2"}})
		if allowed != (err == nil) || !allowed && code(err) != codes.InvalidArgument {
			t.Fatalf("allowed %t: ControllerModifyVolume with copies=2: %v", allowed, err)
		}
		row := h.datasetProps(datasetOf(t, volume.GetVolumeId()), "copies")
		if got := row.User["copies"]; allowed != (got == "2") {
			t.Errorf("allowed %t: copies is %q after the modify", allowed, got)
		}
	}
}
