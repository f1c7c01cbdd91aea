-- SnapshotGuarded (program.go). argv = snapshot, dataset, owned, excluded,
-- unique property, report property, size property, internal property,
-- pending property, others…, "--", then property, value pairs.
local argv = (...)["argv"]
if zfs.sync.set_prop == nil or zfs.sync.inherit == nil then return {outcome = "unsupported"} end
local snapshot, dataset, owned, excluded, unique, report, sizeprop, internal, pending =
	argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7], argv[8], argv[9]
local others, i = {}, 10
while argv[i] ~= nil and argv[i] ~= "--" do others[#others + 1] = argv[i]; i = i + 1 end
local keys, values = {}, {}
for k = i + 1, #argv, 2 do keys[#keys + 1] = argv[k]; values[#values + 1] = argv[k + 1] end
local value
for k = 1, #keys do if keys[k] == unique then value = values[k] end end
local kind, volsize, refquota
local function describe(outcome, name, size)
	kind = kind or zfs.get_prop(dataset, "type")
	local result = {outcome = outcome, name = name, referenced = zfs.get_prop(name, "referenced"),
		creation = zfs.get_prop(name, "creation"), type = kind}
	if kind == "volume" then
		result.volsize = volsize or zfs.get_prop(dataset, "volsize")
		result.volblocksize = zfs.get_prop(dataset, "volblocksize")
	else
		result.refquota = refquota or zfs.get_prop(dataset, "refquota")
	end
	if report ~= "" then result.reported = zfs.get_prop(dataset, report) end
	if sizeprop ~= "" then result.size = size or zfs.get_prop(name, sizeprop) end
	return result
end
local function carries(name)
	if zfs.get_prop(name, unique) ~= value then return false end
	local deferred = zfs.get_prop(name, "defer_destroy")
	return not (deferred == "on" or deferred == 1 or deferred == true)
end
if not zfs.exists(dataset) then return {outcome = "absent"} end
if zfs.get_prop(dataset, owned) ~= "true" then return {outcome = "not-owned"} end
-- The excluded mark stops only a change: a retry after the volume was
-- deleted (marked, and kept by this very snapshot) finds what it cut.
for _, other in ipairs(others) do
	if zfs.exists(other) and carries(other) then
		if string.sub(other, 1, #dataset + 1) == dataset .. "@" then return describe("present", other) end
		return describe("taken", other)
	end
end
local exists = zfs.exists(snapshot)
if exists and carries(snapshot) then return describe("present", snapshot) end
if excluded ~= "" and zfs.get_prop(dataset, excluded) ~= nil then return {outcome = "not-owned"} end
if exists then
	-- A signal ends a program between two instructions and keeps what its
	-- sync calls did: a run cut off after its snapshot leaves the dataset
	-- carrying pending = this value, and only that snapshot is taken over.
	-- Any other snapshot at the name (an operator's, or one marked
	-- internal or with another value) is not this call's to take.
	if pending == "" or zfs.get_prop(dataset, pending) ~= value or zfs.get_prop(snapshot, unique) ~= nil
		or (internal ~= "" and zfs.get_prop(snapshot, internal) ~= nil) then
		return {outcome = "failed", errno = 17, at = snapshot}
	end
else
	if pending ~= "" then
		local err = zfs.sync.set_prop(dataset, pending, value)
		if err ~= 0 then return {outcome = "failed", errno = err, at = dataset .. " " .. pending} end
	end
	local err = zfs.sync.snapshot(snapshot)
	if err ~= 0 then return {outcome = "failed", errno = err, at = snapshot} end
end
local size
if sizeprop ~= "" then
	-- Read once here, and described from these values below: each read in a
	-- program looks the dataset up by name again.
	kind = zfs.get_prop(dataset, "type")
	if kind == "volume" then
		volsize = zfs.get_prop(snapshot, "volsize")
		size = tostring(volsize)
	else
		refquota = zfs.get_prop(dataset, "refquota")
		size = tostring(refquota)
	end
	keys[#keys + 1] = sizeprop; values[#values + 1] = size
end
for k = 1, #keys do
	local err = zfs.sync.set_prop(snapshot, keys[k], values[k])
	if err ~= 0 then
		zfs.sync.destroy(snapshot)
		if pending ~= "" then zfs.sync.inherit(dataset, pending) end
		return {outcome = "failed", errno = err, at = snapshot .. " " .. keys[k]}
	end
end
-- A run cut off before this line leaves the mark on the dataset: harmless,
-- and the next snapshot of the dataset replaces it and takes it away.
if pending ~= "" then
	local err = zfs.sync.inherit(dataset, pending)
	if err ~= 0 then return {outcome = "failed", errno = err, at = dataset .. " " .. pending} end
end
return describe("done", snapshot, size)
