-- Whether channel programs on this pool can set properties
-- (zfs.sync.set_prop) and clear them (zfs.sync.inherit): what the snapshot
-- and group programs need.
if zfs.sync.set_prop == nil or zfs.sync.inherit == nil then return {outcome = "unsupported"} end
return {outcome = "done"}
