-- Inherit (exec.go, program.go). argv = name, properties….
local argv = (...)["argv"]
local name = argv[1]
if zfs.sync.inherit == nil then return {outcome = "unsupported"} end
if not zfs.exists(name) then return {outcome = "absent"} end
if zfs.check.inherit ~= nil then
	for i = 2, #argv do
		local err = zfs.check.inherit(name, argv[i])
		if err ~= 0 then return {outcome = "failed", errno = err, at = name .. " " .. argv[i]} end
	end
end
for i = 2, #argv do
	local err = zfs.sync.inherit(name, argv[i])
	if err ~= 0 then return {outcome = "failed", errno = err, at = name .. " " .. argv[i]} end
end
return {outcome = "done"}
