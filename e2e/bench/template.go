package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/zfs-csi/zfs-csi/rules"
)

// The template of section 9's volumes: one thin dataset the driver made,
// whose local properties every other volume of the section gets, by zfs
// create or by ZFS_IOC_CREATE (fill_linux.go).

// fillsAsCreated makes volume i by ZFS_IOC_CREATE and reports whether ZFS
// gave it the same local properties zfs create gave the template (its CSI
// name aside). When it did not, or the ioctl failed, the volume is
// destroyed and the section makes its volumes by zfs create.
func (b *bench) fillsAsCreated(ctx context.Context, template thinTemplate, parent string, i int) bool {
	name := fmt.Sprintf("scale-%d", i)
	dataset := parent + "/" + name
	if err := createByIoctl(dataset, template.props(name)); err != nil {
		b.notes = append(b.notes, fmt.Sprintf("section 9: volumes made by zfs create: %v", err))
		return false
	}
	got, err := b.localProperties(ctx, dataset)
	if err == nil && !slices.Equal(got, template.props(name)) {
		err = fmt.Errorf("ZFS_IOC_CREATE gave %v, zfs create %v", got, template.props(name))
	}
	if err != nil {
		b.notes = append(b.notes, fmt.Sprintf("section 9: volumes made by zfs create: %v", err))
		if _, _, err := run(ctx, b.tools.zfs, "destroy", dataset); err != nil {
			b.notes = append(b.notes, fmt.Sprintf("section 9: %v", err))
		}
		return false
	}
	return true
}

// thinTemplate is the local properties of a thin dataset the driver made,
// from which the section makes its others, each with its own CSI name.
type thinTemplate struct {
	properties []property
	csiName    string // the property holding the CSI name
}

// argv is the bare zfs create of another one.
func (t thinTemplate) argv(csiName, dataset string) []string {
	argv := []string{"create"}
	for _, p := range t.props(csiName) {
		argv = append(argv, "-o", p.name+"="+p.value)
	}
	return append(argv, dataset)
}

// props are another one's local properties.
func (t thinTemplate) props(csiName string) []property {
	props := slices.Clone(t.properties)
	for i := range props {
		if props[i].name == t.csiName {
			props[i].value = csiName
		}
	}
	return props
}

// thinTemplate makes one thin dataset through the driver and reads its
// local properties.
func (b *bench) thinTemplate(ctx context.Context) (thinTemplate, error) {
	d, err := startDaemon(ctx, b.daemonConfig("scale"))
	if err != nil {
		return thinTemplate{}, err
	}
	defer d.stop()
	volume, err := createVolume(ctx, d, volumeRequest("scale-0", mountCapability(""), true))
	if err != nil {
		return thinTemplate{}, err
	}
	_, dataset, err := rules.ParseVolumeID(volume.GetVolumeId())
	if err != nil {
		return thinTemplate{}, err
	}
	properties, err := b.localProperties(ctx, dataset)
	if err != nil {
		return thinTemplate{}, err
	}
	if len(properties) == 0 {
		return thinTemplate{}, fmt.Errorf("%s has no local properties", dataset)
	}
	return thinTemplate{properties: properties, csiName: b.props.CSIName}, nil
}

// localProperties are a dataset's local properties as zfs get -p prints
// them, in its order.
func (b *bench) localProperties(ctx context.Context, dataset string) ([]property, error) {
	_, out, err := run(ctx, b.tools.zfs, "get", "-H", "-p", "-s", "local", "-o", "property,value", "all", dataset)
	if err != nil {
		return nil, err
	}
	var properties []property
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, value, found := strings.Cut(line, "\t")
		if found {
			properties = append(properties, property{name, value})
		}
	}
	return properties, nil
}
