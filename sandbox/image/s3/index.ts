// Image push and pull through S3 (`@aws-sdk/client-s3`). See docs/images.md.
export { pushS3 } from './push.js'
export { pullS3 } from './pull.js'
export { createS3Client, type S3ClientInit } from './client.js'
export { parseS3Location, parseS3ImageUrl, blobKey, manifestKey, tagKey, type S3Location, type S3ImageUrl } from './url.js'
export { DEFAULT_PART_SIZE, MIN_PART_SIZE, type PushResult, type PullResult, type S3TransferOptions, type TransferStore, type TransferProgress } from './common.js'
