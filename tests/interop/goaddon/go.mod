module apigw.test/goaddon

go 1.19
