-- SnapshotGroup (group.go). argv = snapshot, owned, excluded, group, name,
-- named, size property, pending property, count property, datasets…, "--",
-- parents…, "--", others….
local argv = (...)["argv"]
if zfs.sync.set_prop == nil or zfs.sync.inherit == nil then return {outcome = "unsupported"} end
local snapname, owned, excluded, group, name, named, sizeprop, pending, countprop =
	argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7], argv[8], argv[9]
local datasets, parents, others, i = {}, {}, {}, 10
local requested = {}
while argv[i] ~= nil and argv[i] ~= "--" do datasets[#datasets + 1] = argv[i]; requested[argv[i]] = true; i = i + 1 end
i = i + 1
while argv[i] ~= nil and argv[i] ~= "--" do parents[#parents + 1] = argv[i]; i = i + 1 end
for k = i + 1, #argv do others[#others + 1] = argv[k] end
-- The managed mark first; the excluded one stops only a change: a retry
-- after a member's volume was deleted (kept by its member) finds the group.
local excludedAt
for _, dataset in ipairs(datasets) do
	if not zfs.exists(dataset) then return {outcome = "absent", at = dataset} end
	if zfs.get_prop(dataset, owned) ~= "true" then return {outcome = "not-owned", at = dataset} end
	if excludedAt == nil and excluded ~= "" and zfs.get_prop(dataset, excluded) ~= nil then excludedAt = dataset end
end
for _, parent in ipairs(parents) do
	if zfs.exists(parent) then
		for child in zfs.list.children(parent) do
			local snapshot = child .. "@" .. snapname
			if not requested[child] and zfs.exists(snapshot) and zfs.get_prop(snapshot, group) == name then
				return {outcome = "taken", at = snapshot}
			end
		end
	end
end
for _, other in ipairs(others) do
	local at = string.find(other, "@", 1, true)
	if at ~= nil and not requested[string.sub(other, 1, at - 1)] and zfs.exists(other) and zfs.get_prop(other, group) == name then
		return {outcome = "taken", at = other}
	end
end
local function deferred(snapshot)
	local value = zfs.get_prop(snapshot, "defer_destroy")
	return value == "on" or value == 1 or value == true
end
local whole, leftovers, missing, member = 0, 0, 0, nil
for _, dataset in ipairs(datasets) do
	local snapshot = dataset .. "@" .. snapname
	if zfs.exists(snapshot) then
		local marked, tagged = zfs.get_prop(snapshot, group), zfs.get_prop(snapshot, named)
		if deferred(snapshot) then
			-- a deleted group's member, kept by a clone: the name is not free
			return {outcome = "failed", errno = 17, at = snapshot}
		elseif marked == name and tagged == name .. "/" .. dataset then
			whole, member = whole + 1, snapshot
		elseif tagged == nil and (marked == name or marked == nil and pending ~= "" and zfs.get_prop(dataset, pending) == name) then
			-- What a run cut off by a signal left: marked with the group,
			-- or bare on a dataset that run marked pending with the name.
			-- A bare snapshot anywhere else is someone else's.
			leftovers = leftovers + 1
		else
			return {outcome = "failed", errno = 17, at = snapshot}
		end
	else
		missing = missing + 1
	end
end
if whole > 0 and missing > 0 then
	-- every member is made before any is marked: a marked member beside a
	-- missing one is a group of other datasets under this name
	return {outcome = "taken", at = member}
end
if whole ~= #datasets then
	if excludedAt ~= nil then return {outcome = "not-owned", at = excludedAt} end
	if whole > 0 or leftovers > 0 then
		for _, dataset in ipairs(datasets) do
			local snapshot = dataset .. "@" .. snapname
			if zfs.exists(snapshot) then
				local err = zfs.sync.destroy(snapshot)
				if err ~= 0 then return {outcome = "failed", errno = err, at = snapshot} end
			end
		end
		return {outcome = "retry"}
	end
	if pending ~= "" then
		for _, dataset in ipairs(datasets) do
			local err = zfs.sync.set_prop(dataset, pending, name)
			if err ~= 0 then return {outcome = "failed", errno = err, at = dataset .. " " .. pending} end
		end
	end
	for _, dataset in ipairs(datasets) do
		local err = zfs.sync.snapshot(dataset .. "@" .. snapname)
		if err ~= 0 then return {outcome = "failed", errno = err, at = dataset .. "@" .. snapname} end
	end
	for _, dataset in ipairs(datasets) do
		local snapshot = dataset .. "@" .. snapname
		local keys, values = {group, named}, {name, name .. "/" .. dataset}
		if countprop ~= "" then keys[#keys + 1], values[#values + 1] = countprop, tostring(#datasets) end
		if sizeprop ~= "" then
			local size = zfs.get_prop(dataset, "refquota")
			if zfs.get_prop(dataset, "type") == "volume" then size = zfs.get_prop(snapshot, "volsize") end
			keys[#keys + 1], values[#values + 1] = sizeprop, tostring(size)
		end
		for k = 1, #keys do
			local err = zfs.sync.set_prop(snapshot, keys[k], values[k])
			if err ~= 0 then return {outcome = "failed", errno = err, at = snapshot .. " " .. keys[k]} end
		end
		if pending ~= "" then
			local err = zfs.sync.inherit(dataset, pending)
			if err ~= 0 then return {outcome = "failed", errno = err, at = dataset .. " " .. pending} end
		end
	end
end
local members = {}
for _, dataset in ipairs(datasets) do
	local snapshot = dataset .. "@" .. snapname
	local member = {referenced = zfs.get_prop(snapshot, "referenced"), creation = zfs.get_prop(snapshot, "creation"),
		createtxg = zfs.get_prop(snapshot, "createtxg"), type = zfs.get_prop(dataset, "type")}
	if member.type == "volume" then
		member.volsize = zfs.get_prop(snapshot, "volsize")
		member.volblocksize = zfs.get_prop(dataset, "volblocksize")
	else
		member.refquota = zfs.get_prop(dataset, "refquota")
	end
	if sizeprop ~= "" then member.size = zfs.get_prop(snapshot, sizeprop) end
	members[dataset] = member
end
if whole == #datasets then return {outcome = "present", members = members} end
return {outcome = "done", members = members}
