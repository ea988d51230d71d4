module example.org/memcg

go 1.19
