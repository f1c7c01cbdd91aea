-- Whether channel programs on this pool can set properties
-- (zfs.sync.set_prop, OpenZFS 2.2): what the snapshot and group programs need.
if zfs.sync.set_prop == nil then return {outcome = "unsupported"} end
return {outcome = "done"}
