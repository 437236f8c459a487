-- wrk -t1 -c256 -d30s -s experiments/serve-faults/storm.lua http://127.0.0.1:PORT/v1/classify
-- The issue's retry storm: every connection sends its next request as soon as it has an answer, 503 or not
-- (wrk's closed loop). One short Japanese text per request; wrk counts the non-2xx answers.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"texts": ["今夜泊まれるホテルを探しています。空いている宿はありますか?"]}'
