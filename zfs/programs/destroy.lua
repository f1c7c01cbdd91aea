-- DestroyGuarded (program.go). argv = name, owned, excluded, keep properties…,
-- "--", origin marks….
local argv = (...)["argv"]
local name, owned, excluded = argv[1], argv[2], argv[3]
local keep, marks, i = {}, {}, 4
while argv[i] ~= nil and argv[i] ~= "--" do keep[#keep + 1] = argv[i]; i = i + 1 end
for k = i + 1, #argv do marks[#marks + 1] = argv[k] end
if not zfs.exists(name) then return {outcome = "absent"} end
local kind = zfs.get_prop(name, "type")
if zfs.get_prop(name, owned) ~= "true" or (excluded ~= "" and zfs.get_prop(name, excluded) ~= nil) then
	return {outcome = "not-owned", type = kind}
end
for child in zfs.list.children(name) do
	return {outcome = "blocked", type = kind, reason = "it has a child dataset, " .. child .. ", that the driver did not make"}
end
local snapshots, held = {}, false
for snapshot in zfs.list.snapshots(name) do
	local holds = zfs.get_prop(snapshot, "userrefs")
	if holds ~= nil and holds ~= 0 and holds ~= "0" then
		return {outcome = "blocked", type = kind, reason = "its snapshot " .. snapshot .. " has a user hold (zfs holds " .. snapshot .. "; zfs release)"}
	end
	for clone in zfs.list.clones(snapshot) do held = true end
	for _, property in ipairs(keep) do
		if zfs.get_prop(snapshot, property) ~= nil then held = true end
	end
	snapshots[#snapshots + 1] = snapshot
end
if held then return {outcome = "held", type = kind} end
local origin = zfs.get_prop(name, "origin") or ""
local marked = false
if origin ~= "" then
	for _, property in ipairs(marks) do
		if zfs.get_prop(origin, property) ~= nil then marked = true end
	end
end
for _, snapshot in ipairs(snapshots) do
	local err = zfs.sync.destroy(snapshot)
	if err ~= 0 then return {outcome = "failed", type = kind, errno = err, at = snapshot} end
end
local err = zfs.sync.destroy(name)
if err ~= 0 then return {outcome = "failed", type = kind, errno = err, at = name} end
return {outcome = "done", type = kind, origin = origin, marked = marked}
