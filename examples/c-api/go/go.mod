module memcg.example/capi

go 1.19
