module memcg

go 1.19
