-- DestroySnapshotGuarded (program.go). argv = snapshot, named, excluded,
-- report, refused.
local argv = (...)["argv"]
local name, named, excluded, report, refused = argv[1], argv[2], argv[3], argv[4], argv[5]
if not zfs.exists(name) then return {outcome = "absent"} end
local deferred = zfs.get_prop(name, "defer_destroy")
if zfs.get_prop(name, named) == nil or (excluded ~= "" and zfs.get_prop(name, excluded) ~= nil)
	or deferred == "on" or deferred == 1 or deferred == true then
	return {outcome = "not-owned"}
end
if refused ~= nil and refused ~= "" and zfs.get_prop(name, refused) ~= nil then
	return {outcome = "refused", reported = zfs.get_prop(name, refused)}
end
local reported = ""
if report ~= "" then reported = zfs.get_prop(name, report) or "" end
local err = zfs.sync.destroy{name, defer = true}
if err ~= 0 then return {outcome = "failed", errno = err, at = name} end
return {outcome = "done", reported = reported}
