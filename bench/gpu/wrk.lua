-- wrk script: POSTs the request bodies of WRK_BODIES (one JSON body per line) to
-- /v1/systemone round-robin, each connection from its own starting point, and prints one
-- JSON line: requests/s, non-200 answers, socket errors and latency percentiles (ms).
local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  bodies = {}
  for line in io.lines(os.getenv("WRK_BODIES")) do
    bodies[#bodies + 1] = line
  end
  at = id % #bodies
  non200 = 0
end

function request()
  at = at % #bodies + 1
  return wrk.format("POST", "/v1/systemone", { ["Content-Type"] = "application/json" }, bodies[at])
end

function response(status, headers, body)
  if status ~= 200 then
    non200 = non200 + 1
  end
end

function done(summary, latency, requests)
  local bad = 0
  for _, t in ipairs(threads) do
    bad = bad + t:get("non200")
  end
  local e = summary.errors
  local s = summary.duration / 1e6
  io.write(string.format(
    '{"requests":%d,"seconds":%.3f,"rps":%.1f,"non200":%d,"socket_errors":%d,' ..
    '"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f}\n',
    summary.requests, s, summary.requests / s, bad, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3, latency:percentile(99) / 1e3,
    latency.max / 1e3))
end
