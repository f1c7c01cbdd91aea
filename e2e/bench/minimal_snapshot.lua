-- The least a snapshot program can do (make bench, section 1): the
-- snapshot and its properties in one transaction, no guard, no mark while
-- it runs, nothing read back. argv = snapshot, then property, value pairs.
-- Timed beside the driver's own program (zfs/programs/snapshot.lua), it
-- shows what the guard, the pending mark and the answer's reads cost.
local argv = (...)["argv"]
local snapshot = argv[1]
local err = zfs.sync.snapshot(snapshot)
if err ~= 0 then return {outcome = "failed", errno = err} end
for k = 2, #argv, 2 do
	err = zfs.sync.set_prop(snapshot, argv[k], argv[k + 1])
	if err ~= 0 then return {outcome = "failed", errno = err} end
end
return {outcome = "done"}
